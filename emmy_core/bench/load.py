"""Is the machine busy? A load probe the tune reads around each variant, and the guard that acts on it.

A timing taken while other processes compete for the CPUs (or the hypervisor steals them)
can be 100x slow and still pass every integrity check: tight repeats of a uniformly slow
run have a small spread. So the harness samples the machine before and after each variant
and computes `Busy.share`: the share of the machine's CPU time, over that interval, that
went to other processes (all busy time in /proc/stat minus this process and its bench
worker, children included) plus the time stolen by the hypervisor. Above the guard's
limit the variant is measured again after a pause, and when it stays busy it is flagged
`busy` with the reason and never recorded.

`LoadProbe` is the interface (inject a scripted one in tests: this machine is never
quiet); `MachineProbe` reads Linux's /proc, and elsewhere only the load average.
Bench scripts use `busy_now()` to print the load beside their figures.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

BUSY_FLAG = "busy"
DEFAULT_MAX_BUSY = 0.5  # others' share (plus steal) of the CPUs above which a timing is not trusted
DEFAULT_RETRIES = 2
DEFAULT_PAUSE_S = 1.0


@dataclass(frozen=True)
class LoadSample:
    """Cumulative CPU counters (clock ticks) at one moment: the machine's, and this bench's own per process."""

    total: int  # all CPU time, idle included (user..steal)
    busy: int  # user + nice + system + irq + softirq
    steal: int
    own: dict[int, int] = field(default_factory=dict)  # pid -> utime + stime + children's
    loadavg: float = 0.0
    cpus: int = 1
    at: float = 0.0  # time.monotonic()


@dataclass(frozen=True)
class Busy:
    """How busy the machine was between two samples, by others than this bench."""

    share: float  # (others' busy time + steal) / all CPU time, 0..1
    others: float  # others' busy time / all CPU time
    steal: float  # stolen time / all CPU time
    loadavg: float
    cpus: int
    seconds: float

    def describe(self) -> str:
        return (f"other processes used {self.others:.0%} of the {self.cpus} CPUs"
                + (f", the hypervisor stole {self.steal:.0%}" if self.steal >= 0.005 else "")
                + f" over {self.seconds:.1f} s (load average {self.loadavg:.2f})")


class LoadProbe(Protocol):
    def sample(self, own_pids: Sequence[int] = ()) -> LoadSample:
        """The counters now; `own_pids` are this bench's processes (their CPU time is not 'others')."""


def parse_proc_stat(text: str) -> tuple[int, int, int]:
    """(total, busy, steal) ticks from the `cpu` line of /proc/stat."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            v = [int(x) for x in parts[1:9]] + [0] * max(0, 9 - len(parts))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            return (user + nice + system + idle + iowait + irq + softirq + steal,
                    user + nice + system + irq + softirq, steal)
    raise ValueError("no cpu line in /proc/stat")


def parse_pid_stat(text: str) -> int:
    """utime + stime + cutime + cstime ticks from /proc/PID/stat (the name may hold spaces and parentheses)."""
    fields = text[text.rindex(")") + 2:].split()
    return sum(int(x) for x in fields[11:15])


class MachineProbe:
    """Reads /proc/stat, /proc/PID/stat and the load average; `read` is injectable for tests."""

    def __init__(self, read: Callable[[str], str] | None = None) -> None:
        self._read = read or _read_text

    def sample(self, own_pids: Sequence[int] = ()) -> LoadSample:
        try:
            loadavg = os.getloadavg()[0]
        except OSError:
            loadavg = 0.0
        cpus = os.cpu_count() or 1
        try:
            total, busy, steal = parse_proc_stat(self._read("/proc/stat"))
        except (OSError, ValueError):
            return LoadSample(0, 0, 0, {}, loadavg, cpus, time.monotonic())
        own: dict[int, int] = {}
        for pid in own_pids:
            try:
                own[pid] = parse_pid_stat(self._read(f"/proc/{pid}/stat"))
            except (OSError, ValueError, IndexError):
                continue  # the process is gone (a crashed worker): its time counts as nobody's
        return LoadSample(total, busy, steal, own, loadavg, cpus, time.monotonic())


def _read_text(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as fh:
        return fh.read()


def busy_between(a: LoadSample, b: LoadSample) -> Busy:
    """What share of the machine others (and the hypervisor) took between samples `a` and `b`."""
    total = b.total - a.total
    seconds = max(0.0, b.at - a.at)
    if total <= 0:  # no /proc (or no tick passed): only the load average speaks
        share = min(1.0, b.loadavg / max(1, b.cpus))
        return Busy(share, share, 0.0, b.loadavg, b.cpus, seconds)
    own = sum(b.own[p] - a.own[p] for p in b.own if p in a.own)
    others = max(0, (b.busy - a.busy) - own)
    steal = max(0, b.steal - a.steal)
    return Busy(min(1.0, (others + steal) / total), min(1.0, others / total), min(1.0, steal / total),
                b.loadavg, b.cpus, seconds)


def busy_now(probe: LoadProbe | None = None, seconds: float = 0.5) -> Busy:
    """How busy the machine is now, sampled over `seconds` (what a tune checks before it starts)."""
    probe = probe or MachineProbe()
    own = [os.getpid()]
    a = probe.sample(own)
    time.sleep(seconds)
    return busy_between(a, probe.sample(own))


@dataclass
class LoadGuard:
    """Acts on the probe around each timed variant: a variant timed while `share` exceeded `max_busy` is
    measured again (at most `retries` times, after `pause_s`), then flagged `busy` and not recorded.
    A `max_busy` of 1 or more never flags."""

    probe: LoadProbe = field(default_factory=MachineProbe)
    max_busy: float = DEFAULT_MAX_BUSY
    retries: int = DEFAULT_RETRIES
    pause_s: float = DEFAULT_PAUSE_S

    def too_busy(self, busy: Busy) -> bool:
        return busy.share > self.max_busy

    def warning(self, seconds: float = 0.5) -> str | None:
        """A warning when the machine is busy now (by the sampled share or the load average per CPU)."""
        busy = busy_now(self.probe, seconds)
        per_cpu = busy.loadavg / max(1, busy.cpus)
        if not self.too_busy(busy) and per_cpu <= self.max_busy:
            return None
        why = busy.describe() if self.too_busy(busy) else (
            f"its load average is {busy.loadavg:.2f} on {busy.cpus} CPUs, though in the last {busy.seconds:.1f} s "
            f"other processes used {busy.others:.0%} of them")
        return (f"the machine is busy: {why}. Timings taken now can be many times slow; a variant "
                f"timed while others take more than {self.max_busy:.0%} of the CPUs is measured again, then "
                "flagged 'busy' and not recorded")
