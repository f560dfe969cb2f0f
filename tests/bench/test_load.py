"""The noisy-machine guard: a variant timed while others held the CPUs is measured again, then flagged
`busy` and never recorded; the tune warns at start on a busy machine; the summary lists flagged variants
and why, and a kernel whose variants were all flagged does not vanish from it. The machine this runs on
is shared and never quiet, so the probe is scripted."""

from __future__ import annotations

import io

from typer.testing import CliRunner

from emmy_core.bench.harness import BenchConfig, Unit, bench
from emmy_core.bench.load import (
    BUSY_FLAG,
    LoadGuard,
    LoadSample,
    MachineProbe,
    busy_between,
    parse_pid_stat,
    parse_proc_stat,
)
from emmy_core.bench.progress import BenchProgress
from emmy_core.cli.tune_cmd import print_report
from emmy_core.exchange.recorders import StoreRecorder
from emmy_core.store import MemoryStore
from tests.bench import planted
from tests.bench.conftest import tiny_kernel
from tests.bench.probes import ScriptedProbe, quiet

PROC_STAT = "cpu  100 5 50 800 10 3 2 30 0 0\ncpu0 50 2 25 400 5 1 1 15 0 0\nintr 1 2 3\n"


def _pid_stat(ticks: tuple[int, int, int, int]) -> str:
    before = "1234 (a (strange) name) S 1 1234 1234 0 -1 4194560 1 2 3 4"
    return f"{before} {' '.join(map(str, ticks))} 20 0 1 0 100 200 300"


def test_noisy_machine_proc_counters_are_read_as_the_kernel_writes_them() -> None:
    assert parse_proc_stat(PROC_STAT) == (1000, 160, 30)  # total, busy (user nice system irq softirq), steal
    assert parse_pid_stat(_pid_stat((7, 3, 2, 1))) == 13


def test_noisy_machine_own_processes_do_not_count_as_load() -> None:
    """The bench's own worker burning both CPUs is not 'others'; another process doing so is."""
    files = {"/proc/stat": PROC_STAT, "/proc/99/stat": _pid_stat((0, 0, 0, 0))}
    probe = MachineProbe(files.__getitem__)
    a = probe.sample([99])
    files["/proc/stat"] = "cpu  1100 5 50 800 10 3 2 30 0 0\n"  # 1,000 ticks, all busy
    files["/proc/99/stat"] = _pid_stat((900, 100, 0, 0))  # all of them the worker's
    b = probe.sample([99])
    assert busy_between(a, b).share == 0.0
    files["/proc/stat"] = "cpu  2100 5 50 800 10 3 2 130 0 0\n"  # 1,000 busy and 100 stolen of 1,100
    c = probe.sample([99])
    busy = busy_between(b, c)
    assert round(busy.others, 3) == round(1000 / 1100, 3) and round(busy.steal, 3) == round(100 / 1100, 3)
    assert busy.share == 1.0 and "other processes used 91% of the" in busy.describe()


def _bench(probe: ScriptedProbe, plants: list[int], max_busy: float = 0.5):  # type: ignore[no-untyped-def]
    from emmy_core.targets import resolve_card

    store = MemoryStore()
    config = BenchConfig(setting="rank", timeout_s=10, spread_limit=50.0, max_busy=max_busy, busy_retries=2,
                         busy_pause_s=0.0)
    report = bench([(Unit(tiny_kernel(), {"B": 4}), [{"unroll": p} for p in plants])], resolve_card("local"),
                   planted.SPEC, StoreRecorder(store), config, probe=probe)
    return report, store


def test_noisy_machine_a_variant_timed_while_busy_is_measured_again_then_flagged_and_not_recorded() -> None:
    """Issue 9, item 9: a row measured while another process loaded the machine was recorded as clean."""
    report, store = _bench(ScriptedProbe(0.9), [planted.CORRECT, planted.BUILD_ERROR])
    correct, broken = report.outcomes
    assert correct.status == "flagged" and correct.flags == (BUSY_FLAG,)
    assert "machine busy while timing (3 tries)" in correct.message and "other processes used 90%" in correct.message
    assert report.remeasured == 2  # the retries, then the flag
    assert broken.status == "failed" and broken.failure == "build_error"  # a build error is the kernel's, not the load's
    assert [m.status for m in store.measurements()] == ["failed"]


def test_noisy_machine_a_variant_measured_again_once_quiet_is_recorded() -> None:
    # samples: before/after the first try (busy), then before/after the second (quiet)
    report, store = _bench(ScriptedProbe(0.0, 0.9, 0.0, 0.0), [planted.CORRECT])
    (out,) = report.outcomes
    assert out.status == "ok" and report.remeasured == 1
    assert [m.status for m in store.measurements()] == ["ok"]


def test_noisy_machine_a_limit_of_one_never_flags() -> None:
    report, _ = _bench(ScriptedProbe(1.0), [planted.CORRECT], max_busy=1.0)
    assert report.outcomes[0].status == "ok" and report.remeasured == 0


def test_noisy_machine_the_tune_warns_at_start_on_a_busy_machine() -> None:
    warning = LoadGuard(ScriptedProbe(0.8)).warning(seconds=0.0)
    assert warning is not None and "the machine is busy" in warning and "other processes used 80%" in warning
    assert LoadGuard(quiet()).warning(seconds=0.0) is None
    busy_load = LoadSample(0, 0, 0, {}, loadavg=3.0, cpus=2)  # no /proc: the load average alone speaks

    class Loaded:
        def sample(self, own_pids=()):  # type: ignore[no-untyped-def]
            return busy_load

    assert LoadGuard(Loaded()).warning(seconds=0.0) is not None


def test_noisy_machine_the_summary_lists_flagged_variants_and_keeps_all_flagged_kernels(capsys) -> None:  # type: ignore[no-untyped-def]
    report, _ = _bench(ScriptedProbe(0.9), [planted.CORRECT, planted.WRONG])
    print_report(report, into="database x.db")
    out = capsys.readouterr().out
    assert "flagged 2 (busy 1, wrong_result 1; not recorded); measured again on a busy machine: 2" in out
    assert f"flagged {report.planned[0].unit.program.name} B=4 [unroll={planted.CORRECT}]: busy: machine busy" in out
    assert "no clean row: of 2 variants, 2 flagged (busy 1, wrong_result 1)" in out  # the kernel does not vanish
    assert "rows recorded: 0 into database x.db" in out


class _Done:
    status, stats = "ok", None


def test_progress_is_a_line_every_few_seconds_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()
    with BenchProgress(3, enabled=True, every_s=0.0, stream=stream) as progress:
        for _ in range(3):
            progress.advance(_Done(), "k")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("bench: 1/3 variants in ") and "left" in lines[0]
    assert lines[-1].startswith("bench: 3/3 variants") and "done" in lines[-1]
    quiet_stream = io.StringIO()
    with BenchProgress(3, enabled=True, every_s=3600.0, stream=quiet_stream) as progress:
        progress.advance(_Done(), "k")
    assert quiet_stream.getvalue().count("\n") == 1  # only the closing line within the hour


def test_tune_budget_is_a_positive_number_or_all(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from emmy_core.cli.main import app

    for bad in ("zero", "0"):
        result = CliRunner().invoke(app, ["tune", "--model", "mlp", "--shape", "B=1,S=8", "--budget", bad,
                                          "--db", str(tmp_path / "t.db")])
        assert result.exit_code == 2 and "or 'all'" in result.output, result.output


def test_noisy_machine_judges_times_timeouts_and_spreads_not_the_kernels_own_failures() -> None:
    from emmy_core.bench.harness import Outcome, _judged_by_load

    unit = Unit(tiny_kernel(), {"B": 4})

    def out(status: str, failure: str | None = None, flags: tuple[str, ...] = ()) -> Outcome:
        return Outcome(unit, {}, "c", "rank", "tune", status, failure=failure, flags=flags)

    assert _judged_by_load(out("ok")) and _judged_by_load(out("failed", "timeout"))
    assert _judged_by_load(out("flagged", flags=("spread",)))
    assert not _judged_by_load(out("failed", "build_error")) and not _judged_by_load(out("failed", "crash"))
    assert not _judged_by_load(out("flagged", flags=("wrong_result",)))
    assert not _judged_by_load(out("flagged", flags=("spread", "below_floor")))
