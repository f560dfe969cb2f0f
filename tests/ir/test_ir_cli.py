"""`emmy ir show` and `emmy ir id` on files and standard input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.ir import kernel_id, parse
from tests.ir.test_facts import RMS

runner = CliRunner()


def test_ir_id_prints_the_identity(tmp_path: Path) -> None:
    f = tmp_path / "k.emmy"
    f.write_text(RMS)
    result = runner.invoke(app, ["ir", "id", str(f)])
    assert result.exit_code == 0
    assert result.stdout.strip() == kernel_id(parse(RMS))


def test_ir_show_reads_stdin_and_prints_facts_at_sizes() -> None:
    result = runner.invoke(app, ["ir", "show", "-", "--sizes", "B=2"], input=RMS)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(RMS)
    assert "# sizes B=2" in result.stdout and "bytes_moved" in result.stdout


def test_ir_show_json() -> None:
    result = runner.invoke(app, ["ir", "show", "-", "--json"], input=RMS)
    data = json.loads(result.stdout)
    assert data["kernel_id"] == kernel_id(parse(RMS)) and data["facts"]["sizes"] == {"B": 8}


def test_ir_refuses_bad_text_with_position_and_no_traceback() -> None:
    result = runner.invoke(app, ["ir", "id", "-"], input=RMS.replace("in w:", 'in "w":'))
    assert result.exit_code == 2
    assert "<stdin>:5:6:" in result.output and "Traceback" not in result.output


def test_ir_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ir", "id", str(tmp_path / "nope.emmy")])
    assert result.exit_code == 2 and "nope.emmy: no such source file" in result.output


def test_every_ir_command_has_help() -> None:
    for args in (["--help"], ["ir", "--help"], ["ir", "show", "--help"], ["ir", "id", "--help"]):
        assert runner.invoke(app, args).exit_code == 0


def test_ir_show_refuses_sizes_for_an_extern_kernel_which_has_no_dynamic_axes() -> None:
    text = "extern foo {\n problem 1, 2, 3\n space " + "a" * 64 + "\n}\n"
    assert runner.invoke(app, ["ir", "show", "-"], input=text).exit_code == 0
    result = runner.invoke(app, ["ir", "show", "-", "--sizes", "B=8"], input=text)
    assert result.exit_code == 2 and "foo is an extern kernel: it has no dynamic axes to size (B given)" in result.output
