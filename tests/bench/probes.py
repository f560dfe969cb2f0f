"""Scripted load probes: the development machine is never quiet, so the harness's tests say how busy it was."""

from __future__ import annotations

from collections.abc import Sequence

from emmy_core.bench.load import LoadSample


class ScriptedProbe:
    """Each sample advances the machine by 1,000 ticks, of which `share` went to other processes: the
    shares are taken from `script` in turn (its last value repeats)."""

    def __init__(self, *script: float) -> None:
        self.script = list(script) or [0.0]
        self.calls = 0
        self._total = self._busy = 0

    def sample(self, own_pids: Sequence[int] = ()) -> LoadSample:
        share = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        self._total += 1000
        self._busy += round(1000 * share)
        return LoadSample(self._total, self._busy, 0, {}, 0.0, 2, float(self.calls))


def quiet() -> ScriptedProbe:
    return ScriptedProbe(0.0)
