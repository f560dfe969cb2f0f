"""One set of CLI option types and one `--shape` parser (emmy_core/cli/options.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("CardOpt", "BenchCardOpt", "ShapeOpt", "DbOpt", "DtypeOpt", "SettingOpt", "JsonOpt", "FreezesOpt",
          "PriorOpt", "NoPriorOpt")


def _option_types(path: Path) -> set[str]:
    """Names bound at module level to an `Annotated[...]` (an option type) in one file."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "Annotated"):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_each_option_type_is_defined_once() -> None:
    files = [*sorted((ROOT / "emmy_core" / "cli").glob("*.py")), ROOT / "pipelines" / "__main__.py"]
    where: dict[str, list[str]] = {}
    for f in files:
        for name in _option_types(f):
            where.setdefault(name, []).append(f.name)
    twice = {n: fs for n, fs in where.items() if len(fs) > 1}
    assert not twice, twice
    assert {n for n, fs in where.items() if fs == ["options.py"]} >= set(SHARED)
    assert "DbOption" not in where and "JsonOption" not in where


@pytest.mark.parametrize("command", [["tune", "--model", "mlp"], ["compile", "--model", "mlp"],
                                     ["explain", "--model", "mlp"], ["graph", "show", "--model", "mlp"],
                                     ["suggest", "--model", "mlp"], ["main"]])
def test_every_model_command_reads_shape_with_the_one_parser(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--shape", "B=2"])
    assert result.exit_code == 2, result.output
    assert "--shape must give exactly B and S (e.g. B=8,S=128), got 'B=2'" in result.output
    result = CliRunner().invoke(app, [*command, "--shape", "B=2,S=x"])
    assert result.exit_code == 2 and "--shape 'B=2,S=x': size 'S=x' is not NAME=INT" in result.output


def test_a_kernel_run_takes_the_sizes_of_its_own_axes(tmp_path: Path) -> None:
    kernel = tmp_path / "k.emmy"
    kernel.write_text("not a kernel")
    result = CliRunner().invoke(app, ["run", "--kernel", str(kernel), "--shape", "N=4"])
    assert "--shape" not in result.output  # N=4 is accepted for a kernel; the file itself is what is refused
    assert result.exit_code != 0


@pytest.mark.parametrize("spec", ["B,S,４８", "B,S,²"])
def test_an_input_spec_size_in_other_than_ascii_digits_is_refused_naming_the_flag(tmp_path: Path,
                                                                                  spec: str) -> None:
    result = CliRunner().invoke(app, ["explain", "--model", "tests.compile.test_equals_torch:UserBlock", "--input",
                                      spec, "--dtype", "f32", "--shape", "B=3,S=7", "--db",
                                      str(tmp_path / "none.db"), "--no-prior"])
    assert result.exit_code == 2, result.output
    item = spec.split(",")[-1]
    assert f"input spec {spec!r}: {item!r} is not B, S or a size in 1..1048576" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
