"""Progress of a long bench on the terminal: variants done, failed, flagged, best so far, time left."""

from __future__ import annotations

from typing import Any


class BenchProgress:
    """A rich progress bar on standard error when enabled; a no-op otherwise (tests, pipes)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.done = self.failed = self.flagged = 0
        self.best: dict[str, float] = {}
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> BenchProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[status]}"), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task("bench", total=self.total, status="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _status(self, kernel: str) -> str:
        best = self.best.get(kernel)
        best_text = f"{kernel[:28]} best {best:.1f} us" if best is not None else kernel[:28]
        return f"failed {self.failed}  flagged {self.flagged}  {best_text}"

    def advance(self, outcome: Any, kernel: str) -> None:
        self.done += 1
        if outcome.status == "failed":
            self.failed += 1
        elif outcome.status == "flagged":
            self.flagged += 1
        elif outcome.status == "ok" and outcome.stats is not None:
            self.best[kernel] = min(self.best.get(kernel, float("inf")), outcome.stats.median_us)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, status=self._status(kernel))

    def skip(self, n: int) -> None:
        if self._bar is not None and n > 0:
            self._bar.update(self._task, advance=n)
