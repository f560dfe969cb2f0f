"""Progress of a long bench (variants done, failed, flagged, best so far, time left: `BenchProgress`) and
of a long command's stages (capturing, settling forks, building kernels N/M, running: `StageProgress`).

On a terminal, a rich progress display on standard error. Elsewhere (a pipe, a log file, a
scheduler's output) plain lines on standard error, a few seconds apart at most, so that a tune
or a compile running for minutes is never silent. Disabled, nothing.
"""

from __future__ import annotations

import sys
import threading
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


class StageProgress:
    """The stage a long command is at, on standard error: `stage(text)` as each starts, `count(text, done, total)`
    within a counted one (it may be called from worker threads). On a terminal one rich line redrawn in place:
    a spinner, `what`, the stage with its count, the time so far (cleared at the end, so the command's own
    output follows as it would without it). Elsewhere a plain line as each stage starts and, within a counted
    stage, at its end and at most every `every_s` between, so a compile whose stages take minutes is never
    silent; disabled, nothing."""

    def __init__(self, what: str, enabled: bool = True, every_s: float = 5.0, stream: TextIO | None = None) -> None:
        self.what = what
        self.enabled = enabled
        self.every_s = every_s
        self.stream = stream
        self._bar: Any = None
        self._task: Any = None
        self._started = 0.0
        self._last_line = 0.0
        self._counting = ""
        self._lock = threading.Lock()

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def __enter__(self) -> StageProgress:
        self._started = self._last_line = time.monotonic()
        if self.enabled and self._out().isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(SpinnerColumn(), TextColumn(f"[bold]{_escaped(self.what)}"),
                                 TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=Console(file=self._out()), transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    def _show(self, text: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=_escaped(text))
        elif self.enabled:
            now = time.monotonic()
            print(f"{self.what}: {text} ({_duration(now - self._started)} in)", file=self._out(), flush=True)
            self._last_line = now

    def stage(self, text: str) -> None:
        """The command has started `text` (e.g. `capturing the model`)."""
        with self._lock:
            self._counting = ""
            self._show(text)

    def count(self, text: str, done: int, total: int) -> None:
        """Within stage `text`, `done` of `total` are done (e.g. `building kernels`, 2, 5): on a terminal always
        shown; elsewhere when the stage starts, when it ends and every `every_s` between."""
        with self._lock:
            starting = self._counting != text
            self._counting = text
            if self._bar is not None or starting or done >= total or \
                    time.monotonic() - self._last_line >= self.every_s:
                self._show(f"{text} {done}/{total}")


def _escaped(text: str) -> str:
    """`text` as rich prints it literally (a `[` opens its markup)."""
    from rich.markup import escape

    return escape(text)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
