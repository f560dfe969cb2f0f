"""`Compiled`: a model that runs on generated kernels (what `emmy_core.compile` returns; `api.py`).

`compile` captures the module on small stand-ins of its example inputs (never at the sizes
asked for), runs the graph passes and lowers, opens the evidence sources of its card and
setting (the freeze's goldens, the local tuning database, the prior, the rule), warns once
when there is no prior, and settles every fork at the example's sizes (building each chosen
kernel: an option that does not build is blocked and its fork resolved again). The returned
`Compiled` computes what the module computes: at each distinct size of its dynamic axes it
settles the forks once (cached), checks that the buffers fit before allocating them, allocates
them once, and launches the kernels (C with OpenMP on a CPU, Triton on a GPU).

`Compiled.resolve(sizes)` settles the forks of any size without building or allocating
anything (what `explain` and the release gate use); `Compiled.record` is the resolution record
of every size resolved so far, `Compiled.explain()` prints it. With `strict_evidence=True`, a
size whose forks fall past the measured tiers raises `StrictEvidenceError` listing every one.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from emmy_core.compiler.build import Builder, runnable_here
from emmy_core.compiler.launch import Launcher
from emmy_core.compiler.layout import Layout, plan_layout
from emmy_core.compiler.memory import check_fits
from emmy_core.compiler.runner import Runner
from emmy_core.compiler.runner_cache import RunnerCache
from emmy_core.compiler.weights import WeightWatch, check_same_kind
from emmy_core.evidence.context import PriorArg, PriorUnavailableWarning, open_sources
from emmy_core.evidence.freeze import FreezesArg
from emmy_core.evidence.model import KernelPlan, ModelResolver, resolutions_of, stale_recordings
from emmy_core.evidence.resolution import Resolution, ResolutionError, ResolutionRecord, StrictEvidenceError
from emmy_core.evidence.sources import Sources
from emmy_core.graph.errors import GraphError
from emmy_core.graph.execute import graph_sizes
from emmy_core.graph.lower import Lowered
from emmy_core.ir.check import MAX_EXTENT
from emmy_core.ir.sizes import format_sizes, parse_sizes, size_bucket
from emmy_core.targets.card import Card
from emmy_core.threads import warn_if_spinning


class NoGradientsWarning(UserWarning):
    """A compiled model was called where torch would track gradients: its outputs carry none."""


def card_of(card: str | Card) -> Card:
    """`card` itself, or the card it names (`local`: this machine's)."""
    if isinstance(card, Card):
        return card
    from emmy_core.targets import resolve_card

    return resolve_card(card)


PLANS_KEPT = 64  # sizes whose settled plans a bucketed compile keeps (the runners keep fewer: `RunnerCache`)


class Compiled:
    """A compiled model: call it like the module; forks are settled and buffers allocated once per size."""

    def __init__(self, lowered: Lowered, card: Card, setting: str, sources: Sources, *, strict_evidence: bool,
                 device: torch.device, builder: Builder | None = None, module: nn.Module | None = None,
                 buckets: bool = False) -> None:
        self.lowered = lowered
        self.card = card
        self.setting = setting
        self.sources = sources
        self.strict_evidence = strict_evidence
        self.device = device
        self.cannot_run = runnable_here(card) if builder is None else None
        self.builder = builder
        self.record = ResolutionRecord(lowered.graph.name, card.name, setting)
        for note in sources.notes:
            self.record.add_note(note)
        # `buckets`: a size of a bucket settled before takes that settle's choices (`ModelResolver`)
        self._static = ModelResolver(sources, buckets=buckets)
        self._built = ModelResolver(sources, builder.check, buckets=buckets) if builder is not None else None
        self._plans: dict[str, list[KernelPlan]] = {}
        self._stale_read: set[frozenset[str]] = set()  # the kernel sets whose stale goldens the record holds
        self._built_buckets: set[tuple[tuple[str, int], ...]] = set()  # size buckets the building resolver settled
        self._runners = RunnerCache()
        self._building = threading.RLock()  # settling forks, following weights, building runners
        self._weights: dict[str, torch.Tensor] | None = None
        self._watch = WeightWatch(module, lowered.weights) if module is not None else None
        self._warned_no_grad = False

    # ---- settling forks -------------------------------------------------------------------------

    def _sizes(self, sizes: Mapping[str, int] | str) -> dict[str, int]:
        if isinstance(sizes, str):
            out = parse_sizes(sizes)
        elif isinstance(sizes, Mapping):
            out = {}
            for k, v in sizes.items():
                if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_EXTENT:
                    raise GraphError(f"size of {str(k)[:40]} must be a whole number in 1..{MAX_EXTENT}, got "
                                     f"{str(v)[:40]}")
                out[str(k)] = int(v)
        else:
            raise GraphError(f"sizes must be a mapping like {{'B': 8}} or text like 'B=8', got {type(sizes).__name__}")
        axes = sorted(k for k, _ in self.lowered.graph.sizes)
        if sorted(out) != axes:
            raise GraphError(f"{self.lowered.graph.name} has dynamic axes {', '.join(axes) or 'none'}; got "
                             f"{', '.join(sorted(out)) or 'none'}")
        return out

    def _settle(self, sizes: dict[str, int], resolver: ModelResolver) -> list[KernelPlan]:
        try:
            plans = resolver.model(self.lowered, sizes)
        finally:
            for note in self.sources.close():
                self.record.add_note(note)
        # a plan taking its bucket's choices adds nothing to the record but its size: its forks are the bucket's
        # first size's, recorded there (a server meets thousands of lengths; each kept them all, 49 KiB a length
        # of a tiny Llama)
        self.record.settled(resolutions_of([p for p in plans if not p.bucket_of]), format_sizes(sizes))
        kernels = frozenset(p.key.kernel_id for top in plans for p in top.walk())
        if kernels not in self._stale_read:  # a new size of the same kernels names no other stale golden
            self._stale_read.add(kernels)
            self.record.add_stale(stale_recordings(self.sources, plans))
        if self.strict_evidence:
            fell = [r for r in resolutions_of(plans) if r.applied and not r.measured]
            if fell:
                raise StrictEvidenceError(self.record, fell)
        return plans

    def _planned(self, sizes: dict[str, int], build: bool) -> list[KernelPlan]:
        """The settled plans at `sizes`: built ones when asked (and cached), else the ones settled so far."""
        text = format_sizes(sizes)
        if text in self._plans:
            plans = self._plans.pop(text)  # the most recent last: the oldest goes first
            self._plans[text] = plans
            return plans
        if self._static.buckets:
            while len(self._plans) >= PLANS_KEPT:  # settled again if met again: its bucket's, in microseconds
                del self._plans[next(iter(self._plans))]
        if build:
            if self._built is None:
                raise RuntimeError(self.cannot_run or "this compile resolves only; it builds nothing")
            bucket = size_bucket(sizes)
            if bucket not in self._built_buckets:  # a bucket settled before has its kernels built: nothing ahead
                self._build_ahead(sizes)
            self._plans[text] = self._settle(sizes, self._built)
            if self._built.buckets:
                self._built_buckets.add(bucket)
            return self._plans[text]
        return self._settle(sizes, self._static)

    def _build_ahead(self, sizes: dict[str, int]) -> None:
        """Settles the forks at `sizes` without building, then builds every chosen kernel at once (side by side).
        When all built, the building resolver takes these plans as they are: its check would have passed each
        answer, so they are what it settles, at one compile's wait instead of the sum. When one did not build,
        the building resolver settles as before, blocking it (the others are built already)."""
        assert self.builder is not None and self._built is not None
        try:
            plans = self._static.model(self.lowered, sizes)
        except ResolutionError:
            return  # the building resolver raises it, with the check's reasons
        leaves = [p for top in plans for p in top.walk()]
        if self.builder.build_all((p.program, p.schedule) for p in leaves if p.schedule is not None):
            for p in leaves:
                self._built.plans.setdefault(p.key, p)

    def takes_bucket(self, sizes: Mapping[str, int], first: Mapping[str, int]) -> bool:
        """Whether every kernel at `sizes` takes the very choices (built) it took at `first`, a size settled with
        builds before (`ModelResolver.takes_bucket`): then the runner made for `first` computes at `sizes` too
        (`Runner.sized`), with no settle of its own. The record lists the size, as it lists every size that took
        its bucket's choices."""
        if self._built is None or not self._built.buckets:
            return False
        s = self._sizes(sizes)
        try:
            same = self._built.takes_bucket(self.lowered, s, first)
        finally:
            for note in self.sources.close():
                self.record.add_note(note)
        if same:
            self.record.settled([], format_sizes(s))
        return same

    def prepare(self, sizes: Mapping[str, int] | str) -> list[Resolution]:
        """Settles every fork at `sizes` with each chosen kernel built (nothing allocated); cached per size."""
        return resolutions_of(self._planned(self._sizes(sizes), build=True))

    def resolve(self, sizes: Mapping[str, int] | str) -> list[Resolution]:
        """Settles every fork at the model's `sizes` (e.g. `B=8,S=128`) without building or allocating."""
        return resolutions_of(self._planned(self._sizes(sizes), build=False))

    def layout(self, sizes: Mapping[str, int] | str, views: frozenset[str] = frozenset(), build: bool = False) -> Layout:
        """Every buffer a call at `sizes` would use (nothing allocated): `layout(...).nbytes` is its need. The outputs
        in `views` that can be (`layout.output_views`) are handed back as strided views, not copies. With `build`,
        the forks are settled with each chosen kernel built first (`prepare`, without its list of resolutions)."""
        s = self._sizes(sizes)
        return plan_layout(self.lowered, s, self._planned(s, build=build), views)

    # ---- running --------------------------------------------------------------------------------

    def _launcher(self, plan: KernelPlan) -> Launcher:
        assert self.builder is not None and plan.schedule is not None
        return Launcher(self.builder.build(plan.program, plan.schedule), plan.sizes, plan.program.name,
                        self.card.target)

    def _weights_on_device(self) -> dict[str, torch.Tensor]:
        if self._weights is None:
            self._weights = {p: w.detach().to(self.device).contiguous() for p, w in self.lowered.weights.items()}
        return self._weights

    def _module_weights(self) -> list[torch.Tensor]:
        """The module's own weight tensors (whether they require grad), when the module is known."""
        return self._watch.tensors() if self._watch is not None else []

    def follow_weights(self) -> list[str]:
        """Takes in the module's weights changed since they were last read (every call does this first).

        A weight edited in place is copied again to the device where it has its own copy, and every
        launch that reads it is bound again (a CPU matmul packs it again); a replaced one of the same
        shape and data type is read anew by every runner; one of another shape or type is refused.
        Returns the paths taken in.
        """
        if self._watch is None:
            return []
        changes = self._watch.changes()
        if not changes:
            return []
        edited: set[str] = set()
        replaced = False
        for change in changes:
            check_same_kind(change.path, self.lowered.weights[change.path], change.tensor)
            if change.replaced:
                self.lowered.weights[change.path] = change.tensor
                replaced = True
            else:
                edited.add(change.path)
        if replaced:  # the device copies and the buffers bound to them are made again when next run
            self._weights = None
            self._runners.clear()
        elif self._weights is not None:
            with torch.no_grad():
                for path in edited:
                    own, there = self.lowered.weights[path], self._weights[path]
                    if there.data_ptr() != own.data_ptr():
                        there.copy_(own)
            for runner in self._runners.values():
                runner.rebind(edited)
        return [c.path for c in changes]

    def runner(self, sizes: Mapping[str, int] | str) -> Runner:
        """The runner at `sizes`: forks settled with builds, buffers checked against free memory, allocated.
        One thread at a time settles and builds; calls of a built runner from several threads take turns
        (`Runner.run`)."""
        with self._building:
            return self._runner(sizes)

    def _runner(self, sizes: Mapping[str, int] | str) -> Runner:
        self.follow_weights()
        s = self._sizes(sizes)
        text = format_sizes(s)
        kept = self._runners.get(text)
        if kept is not None:
            return kept
        layout = plan_layout(self.lowered, s, self._planned(s, build=True))
        check_fits(layout.nbytes, self.device, f"{self.lowered.graph.name} at {text}")
        runner = Runner(layout, self._weights_on_device(), self.device, self._launcher)
        self._runners.put(text, runner)
        return runner

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        sizes = graph_sizes(self.lowered.graph, inputs)
        for i, t in enumerate(inputs):
            if t.device != self.device:
                raise GraphError(f"input {i} is on {t.device}; this model was compiled for {self.device}")
        if not self._warned_no_grad and torch.is_grad_enabled() and (
                any(t.requires_grad for t in inputs) or any(w.requires_grad for w in self._module_weights())):
            self._warned_no_grad = True
            warnings.warn(NoGradientsWarning(
                f"{self.lowered.graph.name}: Emmy computes no gradients; its outputs do not require grad and "
                "backward() through them is not possible (call it under torch.no_grad() or torch.inference_mode() "
                "to say so)"), stacklevel=2)
        with torch.no_grad():
            out = self.runner(sizes).run(inputs)
        return out[0] if len(out) == 1 else out

    def explain(self, as_json: bool = False, width: int = 120) -> str:
        """The resolution record as a table fitted to `width` columns (or JSON); a kernel's sizes named by the
        model's axes."""
        from emmy_core.evidence.render import render_record

        if as_json:
            import json

            return json.dumps(self.record.to_json(), indent=2, sort_keys=True)
        axes = {k.kernel_id: {a: "·".join(str(d) for d in dims) for a, dims in k.axes}
                for k in self.lowered.kernels}
        return render_record(self.record, axes, width)


def _example_device(example_inputs: Sequence[torch.Tensor]) -> torch.device:
    devices = {t.device for t in example_inputs if isinstance(t, torch.Tensor)}
    if len(devices) != 1:
        raise GraphError(f"example inputs must be tensors on one device, got {sorted(map(str, devices))}")
    return next(iter(devices))


def check_arguments(module: object, prior: object, strict_evidence: object, library: object = True) -> None:
    """Refuses, with a TypeError naming what it takes, an argument of the wrong kind before any work (both paths
    of `compile` and `explain`)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"compile takes a torch.nn.Module, got {type(module).__name__} (wrap a function in a "
                        "Module's forward)")
    if not (prior is None or prior is False or isinstance(prior, str | Path) or hasattr(prior, "score_rows")):
        raise TypeError(f"prior= must be None (the installed prior), False (none), a path to a prior artifact or a "
                        f"loaded prior; got {type(prior).__name__}")
    if not isinstance(library, bool):
        raise TypeError(f"library= must be True (torch's own kernel is a candidate of every matrix product) or False "
                        f"(Emmy's kernels only), got {type(library).__name__} {str(library)[:20]!r}")
    if not isinstance(strict_evidence, bool):
        raise TypeError(f"strict_evidence= must be True or False, got {type(strict_evidence).__name__} "
                        f"{str(strict_evidence)[:20]!r}")


def prepare(module: nn.Module, example_inputs: Sequence[torch.Tensor], card: str | Card, setting: str, *,
             strict_evidence: bool, tuning_db: Path | str | None, freezes: FreezesArg, prior: PriorArg,
             build: bool, name: str | None = None, library: bool = True) -> tuple[Compiled, dict[str, int]]:
    from emmy_core.codegen.backend import get_setting
    from emmy_core.graph.pipeline import compile_module

    check_arguments(module, prior, strict_evidence, library)
    get_setting(setting)
    the_card = card_of(card)
    device = _example_device(example_inputs)
    lowered = compile_module(module, example_inputs, name=name)
    sources = open_sources(the_card, setting, freezes=freezes, tuning_db=tuning_db, prior=prior, library=library)
    prior_source = next(s for s in sources.items if s.tier == "prior")
    why = prior_source.unavailable()
    if why is not None and prior is not False:
        warnings.warn(PriorUnavailableWarning(f"compiling {lowered.graph.name} for {the_card.name}: {why}; forks no "
                                              "measurement settles fall to the rule's first option"), stacklevel=3)
    builder = None
    if build and runnable_here(the_card) is None:
        if the_card.target == "cpu" and device.type != "cpu":
            raise GraphError(f"{the_card.name} is a CPU; the example inputs are on {device}")
        if the_card.target == "cuda" and device.type == "cpu" and torch.cuda.is_available():
            raise GraphError(f"{the_card.name} is a GPU; the example inputs are on the CPU")
        builder = Builder(the_card, setting)
        if the_card.target == "cpu":
            warn_if_spinning()
    compiled = Compiled(lowered, the_card, setting, sources, strict_evidence=strict_evidence, device=device,
                        builder=builder, module=module)
    return compiled, dict(lowered.graph.sizes)
