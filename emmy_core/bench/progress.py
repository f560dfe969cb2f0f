"""Progress of a long bench: variants done, failed, flagged, best so far, time left.

On a terminal, a rich progress bar on standard error. Elsewhere (a pipe, a log file, a
scheduler's output) one plain line on standard error every few seconds, so that a tune
running for minutes is never silent. Disabled, nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class BenchProgress:
    """Counts outcomes and shows them: a bar when `stream` is a terminal, else a line every `every_s`."""

    def __init__(self, total: int, enabled: bool = True, every_s: float = 5.0, stream: TextIO | None = None) -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.every_s = every_s
        self.stream = stream
        self.done = self.failed = self.flagged = 0
        self.best: dict[str, float] = {}
        self._bar: Any = None
        self._task: Any = None
        self._started = 0.0
        self._last_line = 0.0
        self._kernel = ""

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def __enter__(self) -> BenchProgress:
        self._started = self._last_line = time.monotonic()
        if self.enabled and self._out().isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[status]}"), TimeRemainingColumn(),
                                 console=Console(file=self._out()), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task("bench", total=self.total, status="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif self.enabled and self.done:
            self._line(final=True)

    def _status(self, kernel: str) -> str:
        best = self.best.get(kernel)
        best_text = f"{kernel[:28]} best {best:.1f} us" if best is not None else kernel[:28]
        return f"failed {self.failed}  flagged {self.flagged}  {best_text}"

    def _line(self, final: bool = False) -> None:
        now = time.monotonic()
        elapsed = now - self._started
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        eta = "done" if final else f"about {_duration(left)} left"
        print(f"bench: {self.done}/{self.total} variants in {_duration(elapsed)}, {eta}; "
              f"{self._status(self._kernel)}", file=self._out(), flush=True)
        self._last_line = now

    def advance(self, outcome: Any, kernel: str) -> None:
        self.done += 1
        self._kernel = kernel
        if outcome.status == "failed":
            self.failed += 1
        elif outcome.status == "flagged":
            self.flagged += 1
        elif outcome.status == "ok" and outcome.stats is not None:
            self.best[kernel] = min(self.best.get(kernel, float("inf")), outcome.stats.median_us)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, status=self._status(kernel))
        elif self.enabled and time.monotonic() - self._last_line >= self.every_s:
            self._line()

    def skip(self, n: int) -> None:
        if n <= 0:
            return
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
