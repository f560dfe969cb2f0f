"""`emmy compile` says which stage it is at on stderr (capturing, settling forks, building kernels N/M, running),
as `emmy tune` shows its bench: a line per stage where stderr is no terminal, nothing with `--no-progress`."""

from __future__ import annotations

import io
import re
from pathlib import Path

from typer.testing import CliRunner

from emmy_core.bench.progress import StageProgress
from emmy_core.cli.main import app

runner = CliRunner()


def test_stages_are_a_line_each_and_a_count_a_line_at_its_start_and_end_when_not_on_a_terminal() -> None:
    stream = io.StringIO()
    with StageProgress("compile m", every_s=3600.0, stream=stream) as shown:
        shown.stage("capturing the model")
        for done in range(4):
            shown.count("building kernels", done, 3)
        shown.stage("running")
    lines = [re.sub(r" \(\d+ s in\)$", "", line) for line in stream.getvalue().splitlines()]
    assert lines == ["compile m: capturing the model", "compile m: building kernels 0/3",
                     "compile m: building kernels 3/3", "compile m: running"]
    every = io.StringIO()
    with StageProgress("compile m", every_s=0.0, stream=every) as shown:
        for done in range(4):
            shown.count("building kernels", done, 3)
    assert every.getvalue().count("\n") == 4  # a line for every count when a line is due at once
    off = io.StringIO()
    with StageProgress("compile m", enabled=False, stream=off) as shown:
        shown.stage("capturing the model")
        shown.count("building kernels", 1, 1)
    assert off.getvalue() == ""


def test_compile_shows_its_stages_on_stderr_and_no_progress_hides_them(tmp_path: Path) -> None:
    args = ["compile", "--model", "mlp", "--shape", "B=1,S=8", "--dtype", "f32", "--db", str(tmp_path / "none.db"),
            "--no-prior"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    stages = [re.sub(r" \(\d+ s in\)$", "", line).removeprefix("compile mlp at B=1,S=8: ")
              for line in res.stderr.splitlines() if line.startswith("compile mlp at B=1,S=8: ")]
    assert stages[0] == "capturing the model, settling its forks"
    assert "settling forks at B=1,S=8" in stages
    built = [m for m in (re.fullmatch(r"building kernels (\d+)/(\d+)", s) for s in stages) if m]
    assert built and built[0].group(1) == "0" and any(m.group(1) == m.group(2) for m in built)
    assert "compile mlp at" not in res.stdout  # the record alone on stdout
    quiet = runner.invoke(app, [*args, "--no-progress"])
    assert quiet.exit_code == 0 and "compile mlp at" not in quiet.output
