"""Where offline work runs: in this process, or as tasks on a Dask cluster (`emmy_core.compute.scheduler`)."""

from emmy_core.compute.scheduler import (
    DEFAULT_SCHEDULER,
    ComputeError,
    Scheduler,
    TaskMap,
    in_process_map,
    parse_scheduler,
    task_map,
)

__all__ = ["DEFAULT_SCHEDULER", "ComputeError", "Scheduler", "TaskMap", "in_process_map", "parse_scheduler",
           "task_map"]
