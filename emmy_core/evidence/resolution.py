"""The resolution record: for every fork of a compile, which evidence settled it and what it said.

One `Resolution` per fork and compile context (`ForkKey`): the tier that answered (`golden`,
`local`, `prior`, `first`), the source (a freeze file, the tuning database, the prior's file,
the rule), the evidence (the measured rows it rests on with their times, or the prior's
score), the runner-up and the margin to it, the options blocked on the way and why, and why
each earlier tier did not answer. A `ResolutionRecord` gathers a compile's resolutions with
the notes of its sources (a database skipped, a prior refused) and the recordings that no
longer realize (a golden whose kernel this compiler no longer makes). It is the per-fork
report of the seeds' limitation 6, and the release gate reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emmy_core.graph.forks import ForkKey, ForkOption, ScheduleOption

TIERS = ("golden", "local", "prior", "first")
MEASURED_TIERS = frozenset({"golden", "local"})


@dataclass(frozen=True)
class Measured:
    """A measured row that evidence rests on: its measurement key and what it measured."""

    key: ForkKey
    schedule_id: str
    median_us: float
    measured_at: str = ""  # ISO time; '' where the source keeps none (a freeze has no timestamps)
    kernel: str = ""  # the kernel's name, for reading

    def to_json(self) -> dict[str, object]:
        return {"kernel_id": self.key.kernel_id, "kernel": self.kernel, "sizes": self.key.sizes,
                "card": self.key.card, "setting": self.key.setting, "schedule_id": self.schedule_id,
                "median_us": self.median_us, "measured_at": self.measured_at}


@dataclass(frozen=True)
class Resolution:
    """How one fork was settled in one compile context."""

    key: ForkKey
    kernel: str  # the kernel's name
    rule: str  # schedule | split | cut:<seam>
    choice: ForkOption
    tier: str  # one of TIERS
    source: str  # the freeze file, the tuning database, the prior's file, or 'rule'
    evidence: str  # in words: the measurement and its time, the recorded decision, the prior's score
    time_us: float | None = None  # measured time (schedule) or priced sum (structural) of the choice
    score: float | None = None  # the prior's score of the choice
    measurements: tuple[Measured, ...] = ()  # the rows the evidence rests on
    runner_up: str | None = None  # label of the next-best option the answering source saw
    margin: float | None = None  # runner-up time / chosen time - 1 (measured, priced) or score gap (prior)
    blocked: tuple[tuple[str, str], ...] = ()  # (option, why) blocked before this answer
    tried: tuple[tuple[str, str], ...] = ()  # (tier, why it did not answer), in order
    applied: bool = True  # False: a structural choice superseded by another fork of the same kernel
    note: str = ""

    @property
    def label(self) -> str:
        return self.choice.label

    def at(self, key: ForkKey, note: str) -> Resolution:
        """The same answer in another compile context `key` (a size taking its bucket's choices), noting `note`.
        A field-for-field copy: `dataclasses.replace` goes through `__init__` again and cost a server's new length
        a tenth of a millisecond."""
        out = object.__new__(Resolution)
        out.__dict__.update(self.__dict__)
        out.__dict__["key"] = key
        out.__dict__["note"] = f"{self.note}; {note}" if self.note else note
        return out

    @property
    def measured(self) -> bool:
        """Whether a measured tier (golden or local) answered."""
        return self.tier in MEASURED_TIERS

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "kernel_id": self.key.kernel_id, "kernel": self.kernel, "sizes": self.key.sizes, "card": self.key.card,
            "setting": self.key.setting, "rule": self.rule, "choice": self.label, "tier": self.tier,
            "source": self.source, "evidence": self.evidence, "time_us": self.time_us, "score": self.score,
            "measurements": [m.to_json() for m in self.measurements], "runner_up": self.runner_up,
            "margin": self.margin, "blocked": [{"option": o, "why": w} for o, w in self.blocked],
            "tried": [{"tier": t, "why": w} for t, w in self.tried], "applied": self.applied, "note": self.note,
        }
        if isinstance(self.choice, ScheduleOption):
            out["knobs"] = dict(self.choice.knobs)
            out["schedule_id"] = self.choice.schedule_id
        return out


@dataclass(frozen=True)
class StaleRecording:
    """A golden of this card whose kernel this compiler no longer makes: it is not evidence any more."""

    kernel_id: str  # the recorded kernel's identity
    kernel: str  # its name
    sizes: str
    setting: str
    choice: str  # the recorded schedule id or decision
    source: str  # the file or database holding it
    why: str  # what replaced it (a kernel of the same name with another identity, or the trace's model)

    def to_json(self) -> dict[str, object]:
        return {"kernel_id": self.kernel_id, "kernel": self.kernel, "sizes": self.sizes, "setting": self.setting,
                "choice": self.choice, "source": self.source, "why": self.why}


@dataclass
class ResolutionRecord:
    """Every fork a compile settled (per size it ran or resolved at), the sources' notes, stale recordings."""

    model: str
    card: str
    setting: str
    resolutions: list[Resolution] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # sources skipped or refused, and why
    stale: list[StaleRecording] = field(default_factory=list)
    sizes: list[str] = field(default_factory=list)  # model sizes resolved, in order
    _at: dict[tuple[ForkKey, str], int] = field(default_factory=dict, repr=False, compare=False)

    def settled(self, resolutions: list[Resolution], sizes: str) -> None:
        """Takes in one size's resolutions: each (key, rule) settled before is replaced where it stands, a new one
        appended; `sizes` joins the sizes resolved. In time of the resolutions given, not of the record: a server
        meets a new length at every call, and the record of every length before is what it has already."""
        if len(self._at) != len(self.resolutions):  # the list was set or edited from outside: index it again
            self._at = {(r.key, r.rule): i for i, r in enumerate(self.resolutions)}
        for r in resolutions:
            at = self._at.get((r.key, r.rule))
            if at is None:
                self._at[(r.key, r.rule)] = len(self.resolutions)
                self.resolutions.append(r)
            else:
                self.resolutions[at] = r
        if sizes not in self.sizes:
            self.sizes.append(sizes)

    def add_note(self, note: str) -> None:
        if note and note not in self.notes:
            self.notes.append(note)

    def add_stale(self, items: list[StaleRecording]) -> None:
        for s in items:
            if s not in self.stale:
                self.stale.append(s)

    def fell_through(self) -> list[Resolution]:
        """Applied resolutions no measured tier answered (what strict evidence refuses)."""
        return [r for r in self.resolutions if r.applied and not r.measured]

    def tiers(self) -> dict[str, int]:
        """Applied resolutions per tier, every tier listed."""
        counts = dict.fromkeys(TIERS, 0)
        for r in self.resolutions:
            if r.applied:
                counts[r.tier] += 1
        return counts

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "card": self.card, "setting": self.setting, "sizes": list(self.sizes),
                "tiers": self.tiers(), "notes": list(self.notes), "stale": [s.to_json() for s in self.stale],
                "forks": [r.to_json() for r in self.resolutions]}


class StrictEvidenceError(RuntimeError):
    """Forks settled past the measured tiers under strict evidence; lists every one of them."""

    def __init__(self, record: ResolutionRecord, fell: list[Resolution]) -> None:
        self.record = record
        self.forks = fell
        lines = [f"strict evidence: {len(fell)} fork(s) of {record.model} on {record.card} ({record.setting}) "
                 "fell past the measured tiers:"]
        for r in fell:
            lines.append(f"  {r.kernel} [{r.rule}] at {r.key.sizes or '-'}: {r.tier} ({r.label}); "
                         + "; ".join(f"{t}: {w}" for t, w in r.tried))
        for s in record.stale:
            lines.append(f"  stale recording: {s.kernel} at {s.sizes} ({s.setting}) in {s.source}: {s.why}")
        super().__init__("\n".join(lines))


class ResolutionError(RuntimeError):
    """A fork could not be settled at all (every option blocked); names the fork and each reason."""
