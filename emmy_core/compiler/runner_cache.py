"""The runners of one compiled graph, by size, bounded: what a server meeting ever new lengths keeps built.

A runner holds its size's intermediates (`compiler.runner.Runner`), and the runners of one size bucket share one
memory (`Runner.sized`), so the cache bounds memories, their bytes, and runners in all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emmy_core.compiler.runner import Runner

KEEP_SIZES = 16  # runners (sizes) of their own memory one compiled graph keeps built at once
KEEP_BYTES = 1 << 30  # and the buffers they hold, beyond the one just used
KEEP_SIZED = 512  # runners in all, those over another's memory included (`Runner.sized`: a few KiB of views each)


class RunnerCache:
    """The runners of one compiled graph by size text, least recently used dropped first.

    Every runner holds its size's intermediates, allocated once (a 2048-wide Llama layer holds hundreds of MB
    at a long prompt), so a model run at ever new sizes (a server's prompt lengths) would grow without
    bound. At most KEEP_SIZES memories are kept (the runners of one bucket's sizes share one: `Runner.sized`),
    beyond the most recent runner no more than KEEP_BYTES of them, and KEEP_SIZED runners in all (a decode
    step's every cache length is a size: a generate of 40 tokens met 40, and a cache of 16 checked each again at
    every generate); a size dropped and met again is made (and checked) again."""

    def __init__(self, keep: int | None = None, keep_bytes: int | None = None, keep_sized: int | None = None) -> None:
        self._keep, self._keep_bytes, self._keep_sized = keep, keep_bytes, keep_sized
        self._runners: dict[str, Runner] = {}  # insertion order is use order: a hit moves to the end

    def get(self, text: str) -> Runner | None:
        runner = self._runners.pop(text, None)
        if runner is not None:
            self._runners[text] = runner
        return runner

    def held_bytes(self) -> int:
        """The memory the kept runners hold, each buffer once (the runners `Runner.sized` makes share theirs)."""
        return sum({r.storage: r.held_bytes for r in self._runners.values()}.values())

    def put(self, text: str, runner: Runner) -> None:
        self._runners.pop(text, None)
        self._runners[text] = runner
        keep = KEEP_SIZES if self._keep is None else self._keep
        keep_bytes = KEEP_BYTES if self._keep_bytes is None else self._keep_bytes
        keep_sized = KEEP_SIZED if self._keep_sized is None else self._keep_sized
        while len(self._runners) > 1 and (len(self._runners) > keep_sized or self.memories() > keep or
                                          self.held_bytes() > keep_bytes):
            del self._runners[next(iter(self._runners))]

    def memories(self) -> int:
        """How many memories the kept runners hold (the runners of one bucket's sizes share one)."""
        return len({r.storage for r in self._runners.values()})

    def clear(self) -> None:
        self._runners.clear()

    def values(self) -> list[Runner]:
        return list(self._runners.values())

    def __contains__(self, text: object) -> bool:
        return text in self._runners

    def __len__(self) -> int:
        return len(self._runners)
