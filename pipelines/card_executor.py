"""The tune job's executor: dagster-dask's, with each card partition placed on a worker of that card.

A Dask worker of a bench machine offers one resource per card it has, named by `card_resource`
(`dask worker tcp://scheduler:8786 --resources "card-nvidia-h100-80gb-hbm3=1"`). A run of the tune
job carries its partition (the card) in its tags; this executor adds the requirement
`{card_resource(card): 1}` to its steps, so Dask runs them only on a worker of that card (a card no
worker offers waits in the scheduler's queue until one joins).

The configuration is dagster-dask's (`cluster: existing: address: tcp://...` for the fleet's scheduler,
which `dask-jobqueue` or `dask-kubernetes` may have started); the embedded default (`cluster: local`)
starts a local cluster whose one worker offers the run's card: the partition then runs here, and the
tune asset refuses a card this machine does not have, as without an executor.

It submits each step as dagster-dask does, through `query_on_dask_worker`, with one difference: the
run and plan travel inside one opaque argument. dask 2024.12 and later parse a task's arguments into
a task spec, walking into every tuple, and Dagster's run record (a named tuple holding `@record`s that
refuse iteration) breaks that walk in dagster-dask 0.29's own `execute`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg
from dagster_dask.executor import (
    DASK_RESOURCE_REQUIREMENTS_KEY,
    DaskExecutor,
    dask_executor,
    get_dask_resource_requirements,
    query_on_dask_worker,
)

from emmy_core.compute.placement import card_resource

PARTITION_TAG = "dagster/partition"
CLUSTERS = ("local", "existing")


class _Sealed:
    """Arguments Dask must carry to the worker as one pickled object, not walk into."""

    def __init__(self, *args: Any) -> None:
        self.args = args


def _run_step(dependencies: Any, sealed: _Sealed) -> Any:
    """On a worker: one step of the run (`dependencies` only orders the steps)."""
    return query_on_dask_worker(dependencies, *sealed.args)


class CardDaskExecutor(DaskExecutor):
    """dagster-dask's executor placing a card partition's steps on a worker of that card."""

    def _absent_here(self, card: str | None, run_config: dict) -> str:
        """Why a local cluster cannot tune `card` ('' when it can: the card is here, served from a frozen file, or
        the cluster is the fleet's, where a worker of that card may join)."""
        from emmy_core.bench.matrix import CardAbsent, present_card

        replayed = run_config.get("ops", {}).get("tune", {}).get("config", {}).get("replay_from")
        if self.cluster_type != "local" or card is None or replayed:
            return ""
        try:
            present_card(card)
        except CardAbsent as exc:
            return (f"{exc}; give the fleet's scheduler (execution: {{config: {{cluster: {{existing: {{address: "
                    f"tcp://HOST:8786}}}}}}}}) or serve it from a frozen file (ops: {{tune: {{config: {{replay_from: "
                    f"freezes/<slug>.json}}}}}})")
        return ""

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[Any]:
        import dask.distributed
        from dagster._core.errors import raise_execution_interrupts
        from dagster._utils import iterate_with_context

        if not plan_context.instance.is_persistent:
            raise dg.DagsterInvariantViolationError("Dask execution requires a persistent DagsterInstance")
        card = plan_context.dagster_run.tags.get(PARTITION_TAG)
        need = {card_resource(card): 1} if card is not None else {}
        absent = self._absent_here(card, plan_context.run_config)
        if absent:  # a local cluster would only start to refuse it: say so in one line, no traceback
            yield from _refused(plan_context, execution_plan, absent)
            return
        if self.cluster_type == "existing":
            cluster: Any = self.cluster_configuration["address"]
        else:
            config = {"n_workers": 1, **self.cluster_configuration, "threads_per_worker": 1}
            cluster = dask.distributed.LocalCluster(**config, **({"resources": need} if need else {}))
        try:
            with dask.distributed.Client(cluster) as client:
                futures: dict[str, Any] = {}
                for level in execution_plan.get_steps_to_execute_by_level():
                    for step in level:
                        deps = [futures[k] for i in step.step_inputs for k in i.dependency_keys]
                        sealed = _Sealed(plan_context.reconstructable_job, plan_context.dagster_run,
                                         plan_context.run_config, [step.key], plan_context.instance.get_ref(),
                                         execution_plan.known_state)
                        futures[step.key] = client.submit(
                            _run_step, deps, sealed, key=f"{plan_context.job_name}.{step.key}", pure=False,
                            resources={**get_dask_resource_requirements(step.tags), **need})
                done = dask.distributed.as_completed(list(futures.values()), with_results=True)
                for _, events in iterate_with_context(raise_execution_interrupts, done):
                    yield from events
        finally:
            if not isinstance(cluster, str):
                cluster.close()


def _config_schema() -> dict[str, dg.Field]:
    """dagster-dask's configuration with its two clusters Emmy places cards on, `cluster: local` the default:
    `dagster job execute -j tune_card` needs no `execution` block to tune this machine's card."""
    clusters = dask_executor.config_schema.config_type.fields["cluster"].config_type.fields  # type: ignore[union-attr]
    return {"cluster": dg.Field(dg.Selector({k: clusters[k] for k in CLUSTERS}), is_required=False,
                                default_value={"local": {}}, description="where the card's step runs: `local` "
                                "(default: one local worker offering the run's card) or `existing: {address: ...}`")}


def _refused(plan_context: Any, execution_plan: Any, why: str) -> Iterator[Any]:
    """Each step of the plan failed with `why` alone (no stack: the message is all there is to read)."""
    from dagster._core.events import DagsterEvent
    from dagster._core.execution.plan.objects import StepFailureData
    from dagster._utils.error import SerializableErrorInfo

    for level in execution_plan.get_steps_to_execute_by_level():
        for step in level:
            error = SerializableErrorInfo(why, [], "CardAbsent")
            yield DagsterEvent.step_failure_event(plan_context.for_step(step), StepFailureData(error, None),
                                                  message=why)


@dg.executor(name="card_dask", config_schema=_config_schema(),
             requirements=dg.multiple_process_executor_requirements())
def card_dask_executor(init_context: Any) -> CardDaskExecutor:
    """dagster-dask's executor (its configuration; clusters `local` and `existing`) placing each card
    partition on a worker of that card."""
    ((kind, config),) = init_context.executor_config.get("cluster", {"local": {}}).items()
    if kind not in CLUSTERS:
        raise dg.DagsterInvalidConfigError(f"the tune job's executor takes cluster {' or '.join(CLUSTERS)}, not "
                                           f"{kind!r}: start a {kind} cluster with dask-jobqueue and give its "
                                           "address as `existing`", [], None)
    return CardDaskExecutor(kind, config)


__all__ = ["DASK_RESOURCE_REQUIREMENTS_KEY", "CardDaskExecutor", "card_dask_executor"]
