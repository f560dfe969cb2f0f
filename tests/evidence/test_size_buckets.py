"""Size buckets (`ModelResolver(buckets=True)`, `ir.sizes.size_bucket`): a kernel at a new size of a bucket it
was settled in takes that settle's choices, keyed and noted at the new size, unless a measurement speaks of the
new size exactly; another bucket is settled anew."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from emmy_core.evidence.context import open_sources
from emmy_core.evidence.model import ModelResolver
from emmy_core.ir.sizes import size_bucket
from emmy_core.knobs import candidates
from tests.evidence.conftest import CARD, Setup, kernels_of, write_db


def test_size_bucket_rounds_each_size_up_to_a_power_of_two() -> None:
    assert size_bucket({"T": 33}) == size_bucket({"T": 64}) == (("T", 64),)
    assert size_bucket({"T": 65}) == (("T", 128),) and size_bucket({"T": 1}) == (("T", 1),)
    assert size_bucket({"S": 5, "B": 2}) == (("B", 2), ("S", 8))


def test_a_size_of_a_settled_bucket_takes_its_choices(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, _, lowered = proj
    sources = open_sources(CARD, "deploy", freezes=tmp_path, tuning_db=tmp_path / "none.db", library=False)
    resolver = ModelResolver(sources, buckets=True)
    first = resolver.model(lowered, {"B": 1, "S": 40})[0]
    same = resolver.model(lowered, {"B": 1, "S": 50})[0]
    other = resolver.model(lowered, {"B": 1, "S": 70})[0]
    assert same.sizes == {"T": 50} and same.key.sizes == "T=50" and same.key.kernel_id == first.key.kernel_id
    assert (same.schedule, same.decision) == (first.schedule, first.decision)
    assert all("as settled at T=40 (the same size bucket)" in r.note and r.key == same.key
               for p in same.walk() for r in p.resolutions)
    assert not any("size bucket" in r.note for p in other.walk() for r in p.resolutions)  # T=70: bucket 128
    plain = ModelResolver(sources).model(lowered, {"B": 1, "S": 50})[0]
    assert not any("size bucket" in r.note for p in plain.walk() for r in p.resolutions)  # off unless asked
    # each resolution is the bucket's, field for field, in its own context (`Resolution.at`)
    for p, q in zip(same.walk(), first.walk(), strict=True):
        for r, s in zip(p.resolutions, q.resolutions, strict=True):
            assert r == replace(s, key=p.key, note=f"{s.note}; {r.note.rsplit('; ', 1)[-1]}" if s.note else r.note)
            assert s.key == q.key  # the bucket's own plan is left as it was


def test_plans_handed_in_settled_serve_their_bucket_too(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The building resolver takes the plans settled ahead (`Compiled._build_ahead`) at a bucket's first size; the
    bucket's next size takes their choices, as if it had settled them itself (it once settled every kernel
    afresh there: 45 ms, where the sizes after it took 8)."""
    _, _, lowered = proj
    sources = open_sources(CARD, "deploy", freezes=tmp_path, tuning_db=tmp_path / "none.db", library=False)
    ahead, built = ModelResolver(sources, buckets=True), ModelResolver(sources, buckets=True)
    for top in ahead.model(lowered, {"B": 1, "S": 40}):
        for p in top.walk():
            built.plans.setdefault(p.key, p)
    built.model(lowered, {"B": 1, "S": 40})
    same = built.model(lowered, {"B": 1, "S": 50})[0]
    assert all("as settled at T=40 (the same size bucket)" in r.note for p in same.walk() for r in p.resolutions)


def _measured_at_50(proj, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The one-matmul model, a fast option of its kernel measured at T=50 in a local database, and its sources."""
    _, _, lowered = proj
    top = kernels_of(lowered)[0]
    fast = dict(candidates(top, CARD)[3])
    db = write_db(tmp_path / "tune.db", Setup().row(top, fast, 1.0, {"T": 50}))
    return lowered, fast, open_sources(CARD, "deploy", freezes=tmp_path, tuning_db=db, library=False)


def test_a_measurement_at_the_new_size_is_settled_as_ever(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lowered, fast, sources = _measured_at_50(proj, tmp_path)
    resolver = ModelResolver(sources, buckets=True)
    resolver.model(lowered, {"B": 1, "S": 40})
    plan = resolver.model(lowered, {"B": 1, "S": 50})[0]
    assert not any("size bucket" in r.note for p in plan.walk() for r in p.resolutions)
    sched = next(r for p in plan.walk() for r in p.resolutions if r.rule == "schedule")
    assert sched.tier == "local" and dict(sched.choice.knobs) == fast  # type: ignore[union-attr]


def test_a_new_size_reads_the_rows_read_before_without_opening_the_database(  # type: ignore[no-untyped-def]
        proj, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's every new length settles kernels it has read the local rows of: the database is opened again
    for a kernel not read yet or a file changed since, not at every size (an open took 20 ms, five times a
    length, once a tune had made the file)."""
    import emmy_core.store as store_module

    _, _, lowered = proj
    top = kernels_of(lowered)[0]
    fast = dict(candidates(top, CARD)[3])
    db = write_db(tmp_path / "tune.db", Setup().row(top, fast, 1.0, {"T": 60}))
    opens: list[object] = []
    real = store_module.open_store

    def counted(*args: object, **kwargs: object) -> object:
        opens.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "open_store", counted)
    sources = open_sources(CARD, "deploy", freezes=tmp_path, tuning_db=db, library=False)
    resolver = ModelResolver(sources, buckets=True)

    def settle(s: int) -> list:  # type: ignore[type-arg]
        try:
            return resolver.model(lowered, {"B": 1, "S": s})
        finally:
            sources.close()  # as a compile does after every size: the lock released

    settle(40)
    read = len(opens)
    assert read >= 1
    for s in (41, 42, 43):
        settle(s)
    plan = settle(60)[0]  # a row at exactly this size still answers, from the rows read at the first
    assert len(opens) == read
    sched = next(r for p in plan.walk() for r in p.resolutions if r.rule == "schedule")
    assert sched.tier == "local" and dict(sched.choice.knobs) == fast  # type: ignore[union-attr]
    write_db(db, Setup().row(top, fast, 0.9, {"T": 61}))  # the file changed: read again
    settle(44)
    assert len(opens) == read + 1


def test_the_record_takes_a_sizes_resolutions_in_place(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`ResolutionRecord.settled`: a fork settled again replaces its resolution where it stands, a new one is
    appended, each size listed once; a list set from outside is indexed again."""
    from emmy_core.evidence.model import resolutions_of
    from emmy_core.evidence.resolution import ResolutionRecord

    _, _, lowered = proj
    sources = open_sources(CARD, "deploy", freezes=tmp_path, tuning_db=tmp_path / "none.db", library=False)
    resolver = ModelResolver(sources, buckets=True)
    at40, at50 = (resolutions_of(resolver.model(lowered, {"B": 1, "S": s})) for s in (40, 50))
    record = ResolutionRecord("m", CARD.name, "deploy")
    record.settled(at40, "B=1,S=40")
    record.settled(at50, "B=1,S=50")
    assert record.resolutions == at40 + at50 and record.sizes == ["B=1,S=40", "B=1,S=50"]
    again = [r.__class__(**{**r.__dict__, "note": "again"}) for r in at40]
    record.settled(again, "B=1,S=40")
    assert record.resolutions == again + at50 and record.sizes == ["B=1,S=40", "B=1,S=50"]
    record.resolutions = list(at50)
    record.settled(at40, "B=1,S=40")
    assert record.resolutions == at50 + at40


def test_a_size_taking_its_buckets_choices_keeps_nothing_but_its_size(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A server meets thousands of lengths: a length settled as its bucket's first leaves no plan in the resolver
    and no resolution in the record (those are the first size's, recorded there), only its size; a length some
    measurement speaks of is settled and recorded as ever. (Each length kept them all: 49 KiB a length of a tiny
    Llama through the backend.)"""
    import torch

    from emmy_core.compiler.compiled import Compiled

    _, _, lowered = proj
    top = kernels_of(lowered)[0]
    db = write_db(tmp_path / "tune.db", Setup().row(top, dict(candidates(top, CARD)[3]), 1.0, {"T": 60}))
    sources = open_sources(CARD, "deploy", freezes=tmp_path, tuning_db=db, library=False)
    compiled = Compiled(lowered, CARD, "deploy", sources, strict_evidence=False, device=torch.device("cpu"),
                        buckets=True)
    resolver = ModelResolver(sources, buckets=True)
    compiled.resolve({"B": 1, "S": 40})
    resolver.model(lowered, {"B": 1, "S": 40})
    recorded, kept = len(compiled.record.resolutions), len(resolver.plans)
    for s in range(41, 60):
        compiled.resolve({"B": 1, "S": s})
        plans = resolver.model(lowered, {"B": 1, "S": s})
        assert all(p.bucket_of == "T=40" for p in plans)
    assert len(compiled.record.resolutions) == recorded and len(resolver.plans) == kept
    assert compiled.record.sizes == [f"B=1,S={s}" for s in range(40, 60)]
    compiled.resolve({"B": 1, "S": 60})  # the measured size: settled, recorded
    assert any(r.key.sizes == "T=60" and r.tier == "local" for r in compiled.record.resolutions)


def test_a_size_takes_the_bucket_runner_only_where_every_kernel_takes_its_first_sizes_choices(  # type: ignore[no-untyped-def]
        proj, tmp_path: Path) -> None:
    """`ModelResolver.takes_bucket`: what a bucket's runner was made with serves another size of the bucket only
    where each kernel would take those very choices there: not in another bucket, not where a measurement speaks
    of the exact size, not from a first size that had choices of its own."""
    lowered, _, sources = _measured_at_50(proj, tmp_path)
    resolver = ModelResolver(sources, buckets=True)
    first = {"B": 1, "S": 40}
    assert not resolver.takes_bucket(lowered, {"B": 1, "S": 45}, first)  # nothing settled at the first size yet
    resolver.model(lowered, first)
    assert resolver.takes_bucket(lowered, {"B": 1, "S": 45}, first)
    assert resolver.takes_bucket(lowered, {"B": 1, "S": 33}, first)
    assert not resolver.takes_bucket(lowered, {"B": 1, "S": 50}, first)  # T=50 was measured: settled as ever
    assert not resolver.takes_bucket(lowered, {"B": 1, "S": 70}, first)  # another bucket
    resolver.model(lowered, {"B": 1, "S": 50})
    assert not resolver.takes_bucket(lowered, {"B": 1, "S": 45}, {"B": 1, "S": 50})  # 50 had choices of its own
    assert not ModelResolver(sources).takes_bucket(lowered, {"B": 1, "S": 45}, first)  # buckets off
