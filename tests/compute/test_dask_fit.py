"""The fit's folds and seed members on a Dask cluster: the same artifact as in process, a lost worker's task
run again, a task that keeps failing refused with OUT untouched (issue 24).

One small fit (two seed members, few trees) on a toy export of Kernel Tuner caches (three cards, three
kernels, 12 measured tiles each); the cluster is a `LocalCluster` of two worker processes started once
for the module."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from emmy_core.compute import ComputeError, parse_scheduler, task_map
from emmy_core.prior.training import Params

TINY = Params(iterations=20, depth=3, ensemble=2)
FIT = {"pools": "measured", "folds": 2, "seed": 11, "params": TINY, "tracking_uri": "off"}

@pytest.fixture(scope="module")
def in_process(toy_export: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, dict[str, Any]]:
    from emmy_core.prior.fit import fit_prior

    tmp = tmp_path_factory.mktemp("inproc")
    old = Path.cwd()
    os.chdir(tmp)
    try:
        result = fit_prior(toy_export, tmp / "prior.json", **FIT)
    finally:
        os.chdir(old)
    return (tmp / "prior.json").read_bytes(), result.metrics


def _fit(export: Path, out: Path, scheduler: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from emmy_core.prior.fit import fit_prior

    monkeypatch.chdir(out.parent)
    return fit_prior(export, out, scheduler=scheduler, **FIT)


def test_scheduler_setting_parses_inprocess_local_and_tcp_and_refuses_the_rest() -> None:
    assert parse_scheduler(None).kind == "inprocess"
    assert (parse_scheduler("local:2").kind, parse_scheduler("local:2").workers) == ("local", 2)
    assert parse_scheduler("tcp://10.0.0.5:8786").address == "tcp://10.0.0.5:8786"
    for bad in ("local:0", "local:x", "tcp://host", "tcp://h:99999", "udp://h:1", "local:2 "):
        with pytest.raises(ComputeError, match="scheduler"):
            parse_scheduler(bad)


def test_a_scheduler_out_of_range_is_told_the_range_however_far_out() -> None:
    for bad in ("local:0", "local:65", "local:1000", "local:-1", "local:" + "9" * 30):
        with pytest.raises(ComputeError, match="a local cluster has 1 to 64 workers"):
            parse_scheduler(bad)
    for bad in ("tcp://h:0", "tcp://h:65536", "tcp://h:99999"):
        with pytest.raises(ComputeError, match="a TCP port is 1 to 65535"):
            parse_scheduler(bad)


def test_dask_fit_equals_in_process_fit(toy_export: Path, in_process: tuple[bytes, dict[str, Any]],
                                        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same trees, same metrics: the artifact's bytes are equal, the metrics equal but for nothing."""
    result = _fit(toy_export, tmp_path / "prior.json", cluster.scheduler_address, monkeypatch)
    artifact, metrics = in_process
    assert (tmp_path / "prior.json").read_bytes() == artifact
    assert result.metrics == metrics


def test_the_chain_fit_step_trains_on_the_scheduler_it_is_given(
        toy_export: Path, in_process: tuple[bytes, dict[str, Any]], cluster: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`chain.steps.fit` (what `emmy fit` and the `prior` asset call, the latter with its `compute` resource)
    on the cluster: the in-process artifact bit for bit; a dataset already read cannot go to Dask workers."""
    from distributed import Client, get_task_stream

    from emmy_core.chain import steps
    from emmy_core.prior.dataset import read_dataset

    monkeypatch.chdir(tmp_path)
    with Client(cluster.scheduler_address) as client, get_task_stream(client) as stream:
        result = steps.fit(toy_export, tmp_path / "prior.json", fits_dir=tmp_path / "fits",
                           scheduler=cluster.scheduler_address, **FIT)
    assert any(str(t["key"]).startswith("run_train_task") for t in stream.data)  # trained on the workers
    assert (tmp_path / "prior.json").read_bytes() == in_process[0]
    assert result.metrics == in_process[1] and result.run_id is None
    with pytest.raises(steps.ChainError, match="export folder"):
        steps.fit(read_dataset(toy_export), tmp_path / "again.json", fits_dir=tmp_path / "fits",
                  scheduler=cluster.scheduler_address, **FIT)
    assert not (tmp_path / "again.json").exists()


def _kill_a_worker_when_training(cluster: Any, done: threading.Event, killed: list[int]) -> None:
    from distributed import Client

    with Client(cluster.scheduler_address) as client:
        pids = client.run(os.getpid)
        while not done.is_set() and not killed:
            for addr, keys in client.processing().items():
                if any(str(k).startswith("run_train_task") for k in keys) and addr in pids:
                    os.kill(pids[addr], signal.SIGKILL)
                    killed.append(pids[addr])
                    break
            time.sleep(0.01)


def test_a_worker_killed_mid_fit_has_its_task_run_again_and_the_fit_is_the_same(
        toy_export: Path, in_process: tuple[bytes, dict[str, Any]], cluster: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    done, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_a_worker_when_training, args=(cluster, done, killed))
    killer.start()
    try:
        _fit(toy_export, tmp_path / "prior.json", cluster.scheduler_address, monkeypatch)
    finally:
        done.set()
        killer.join()
    assert killed, "no worker was seen training"
    assert (tmp_path / "prior.json").read_bytes() == in_process[0]


def _dies(_: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def test_a_task_that_keeps_killing_workers_fails_clearly_and_out_is_untouched(
        toy_export: Path, in_process: tuple[bytes, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no failure allowed, the first lost worker fails the map, naming the task; the fit writes nothing."""
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), task_map("local:1") as run:
        with pytest.raises(ComputeError, match=r"task _dies #0 of 1 failed .*KilledWorker"):
            run(_dies, [0])
        out = tmp_path / "prior.json"
        out.write_bytes(in_process[0])  # an older prior of its own kind, which a fit may replace
        from emmy_core.prior.dataset import read_dataset
        from emmy_core.prior.fit import fit_dataset
        from emmy_core.prior.fold_tasks import DaskTrainer, DatasetRef, TrainTask

        dataset = read_dataset(toy_export)

        def killing_map(fn: Any, items: list[TrainTask]) -> list[Any]:
            return run(_dies, list(range(len(items))))

        monkeypatch.chdir(tmp_path)
        with pytest.raises(ComputeError, match="KilledWorker"):
            fit_dataset(dataset, out, pools="golden", folds=2, seed=11, params=TINY, tracking_uri="off",
                        trainer=DaskTrainer(DatasetRef(str(toy_export), None, dataset.digest), killing_map))
    assert out.read_bytes() == in_process[0]
    assert not (tmp_path / "_tune").exists()


def test_emmy_fit_and_eval_search_refuse_a_scheduler_that_does_not_parse(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from emmy_core.cli.main import app

    runner = CliRunner()
    for argv in (["fit", str(tmp_path), str(tmp_path / "p.json")], ["eval", "search", str(tmp_path)]):
        done = runner.invoke(app, [*argv, "--scheduler", "udp://h:1"])
        assert done.exit_code != 0
        assert "scheduler 'udp://h:1'" in done.output and not (tmp_path / "p.json").exists()
