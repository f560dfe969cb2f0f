"""Per-card evaluations on a Dask cluster: `emmy eval prior --scheduler` and the chain's evaluation give the
report they give in process (issue 24); a worker refuses an export or a prior that changed under it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.eval import EvalError, EvalReport, evaluate
from emmy_core.eval.card_tasks import EvalTask, card_order, run_eval_task
from emmy_core.eval.extern_order import file_order
from emmy_core.prior import installed_prior_path, load_prior
from emmy_core.prior.fold_tasks import DatasetRef
from emmy_core.prior.provenance import content_digest


def caches(export: Path) -> list[Path]:
    """The toy export's Kernel Tuner caches (written beside it): their order is the extern first option."""
    return sorted(export.parent.glob("c*k*.json"))


@pytest.fixture(scope="module")
def in_process(toy_export: Path) -> EvalReport:
    return evaluate(toy_export, installed_prior_path(), pools="both", extern_order=file_order(caches(toy_export)))


def task_keys(cluster: Any, run: Any) -> list[str]:
    """The keys of the tasks the cluster ran while `run()` ran."""
    from distributed import Client, get_task_stream

    with Client(cluster.scheduler_address) as client, get_task_stream(client) as stream:
        run()
    return [str(t["key"]) for t in stream.data]


def test_per_card_evaluations_on_dask_equal_in_process_evaluations(toy_export: Path, in_process: EvalReport,
                                                                   cluster: Any) -> None:
    """One task per card; every figure of every pool, the summaries and the price points are equal."""
    got: list[EvalReport] = []
    keys = task_keys(cluster, lambda: got.append(evaluate(
        toy_export, installed_prior_path(), pools="both", extern_order=file_order(caches(toy_export)),
        scheduler=cluster.scheduler_address)))
    assert sum(k.startswith("run_eval_task") for k in keys) == 3  # one per card
    there = got[0]
    assert there.to_json() == in_process.to_json()
    assert len(in_process.pools) == 9 and in_process.to_json()["mean"]["first_slowdown_pools"] == 9
    assert list(there.points) == list(in_process.points)
    for k, p in in_process.points.items():
        assert all(np.array_equal(a, b) for a, b in zip(p.arrays(), there.points[k].arrays(), strict=True))


def test_emmy_eval_prior_takes_a_scheduler_and_prints_the_in_process_report(
        toy_export: Path, in_process: EvalReport, cluster: Any, tmp_path: Path) -> None:
    order = [a for f in caches(toy_export) for a in ("--extern-order", str(f))]
    args = ["eval", "prior", str(toy_export), "--pools", "both", "--json", str(tmp_path / "r.json"), *order]
    result = CliRunner().invoke(app, [*args, "--scheduler", cluster.scheduler_address])
    assert result.exit_code == 0, result.output
    assert result.stdout == in_process.markdown()
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(in_process.to_json()))
    refused = CliRunner().invoke(app, [*args[:3], "--scheduler", "local:0"])
    assert refused.exit_code == 2 and "scheduler 'local:0'" in refused.output and "Traceback" not in refused.output


def test_the_chain_evaluation_judges_both_priors_per_card_on_one_cluster(toy_export: Path, cluster: Any,
                                                                          tmp_path: Path) -> None:
    """`chain.evaluation.evaluate` (what `emmy fit` and the `evaluation` asset call, the latter with its `compute`
    resource): the candidate's and the installed prior's cards as tasks of one cluster, the same evaluation."""
    from emmy_core.chain import evaluation as ev
    from emmy_core.prior.dataset import read_dataset

    installed = shutil.copy(installed_prior_path(), tmp_path / "installed.json")
    here = ev.evaluate(toy_export, installed_prior_path(), Path(installed))
    got: list[Any] = []
    keys = task_keys(cluster, lambda: got.append(ev.evaluate(toy_export, installed_prior_path(), Path(installed),
                                                             scheduler=cluster.scheduler_address)))
    assert sum(k.startswith("run_eval_task") for k in keys) == 6  # three cards, two priors
    assert got[0].to_json() == here.to_json() and got[0].installed is not None
    with pytest.raises(EvalError, match="export folder"):
        ev.evaluate(read_dataset(toy_export), installed_prior_path(), None, scheduler=cluster.scheduler_address)


def test_an_evaluation_on_dask_needs_the_prior_file_and_the_export_folder(toy_export: Path) -> None:
    """Workers read both themselves: a prior or dataset already loaded here cannot go to them (refused before
    any cluster starts)."""
    from emmy_core.prior.dataset import read_dataset

    with pytest.raises(EvalError, match="needs the prior's file"):
        evaluate(toy_export, load_prior(installed_prior_path()), pools="measured", scheduler="local:2")
    with pytest.raises(EvalError, match="export folder"):
        evaluate(read_dataset(toy_export), installed_prior_path(), pools="measured", scheduler="local:2")


def test_a_worker_refuses_an_export_or_a_prior_that_changed_under_the_evaluation(toy_export: Path,
                                                                                 tmp_path: Path) -> None:
    """The task carries the digests read here; a worker reading other content fails the task, naming it."""
    from emmy_core.prior.dataset import read_dataset

    data = read_dataset(toy_export)
    card = data.forks[0].card_name
    prior = str(installed_prior_path())
    digest = content_digest(load_prior(prior).doc)
    ok = EvalTask(DatasetRef(str(toy_export), None, data.digest), prior, digest, "measured", card,
                  card_order(file_order(caches(toy_export)), card))
    records, points = run_eval_task(ok)
    assert {r["card"] for r in records} == {card} and len(records) == 3 and list(points) == [f"{card} / deploy"]
    stale = EvalTask(DatasetRef(str(toy_export), None, "0" * 64), prior, digest, "measured", card, None)
    with pytest.raises(RuntimeError, match=f"dataset {toy_export}: its digest is {data.digest[:16]}"):
        run_eval_task(stale)
    with pytest.raises(RuntimeError, match=f"prior {prior}: its content digest is {digest[:16]}"):
        run_eval_task(EvalTask(ok.dataset, prior, "f" * 64, "measured", card, None))
