"""Freezes: canonical per-card files, byte-identical twice and through an import (seed 09, "A frozen
snapshot makes a fit reproducible"); import re-keys from text; hand-run rows travel too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emmy_core.exchange.importer import import_db, import_into
from emmy_core.fileio.safefile import FileWriteError
from emmy_core.formats.cardfile import parse_card_document
from emmy_core.formats.freeze import freeze_db, freeze_store, render_snapshot, snapshot
from emmy_core.ir import identity, kernel_id, render
from emmy_core.ir.builders import matmul, rmsnorm, softmax
from emmy_core.store import (
    CardRow,
    GoldenRow,
    MeasurementRow,
    MeasurementStore,
    MemoryStore,
    RoutingRow,
    open_store,
)
from emmy_core.store.stats import db_stats

H200 = CardRow("NVIDIA H200", "cuda", {"sm_count": 132, "bandwidth_gbs": 4800.0, "memory_gb": 141.0})
H100 = CardRow("NVIDIA H100 80GB HBM3", "cuda", {"sm_count": 132, "bandwidth_gbs": 3350.0})
CPU = CardRow("AMD EPYC AVX-512 x2", "cpu", {"cores": 2})
NORM, SOFT, MM, PIECE_A, PIECE_B = rmsnorm(64), softmax(128), matmul(64, 64, 64), rmsnorm(32), softmax(32)
KERNELS = [NORM, SOFT, MM, PIECE_A, PIECE_B]


def ids() -> list[str]:
    return [kernel_id(k) for k in KERNELS]


def populate(store: MeasurementStore) -> None:
    """Two GPU cards and a CPU: working, failed and hand-run rows, a split with two pieces, goldens."""
    n, s, m, a, b = ids()
    rows = [
        MeasurementRow.ok(n, "B=8", {"block": 64, "num_warps": 4}, H200.name, "deploy", 12.5, spread=0.01, samples=5),
        MeasurementRow.ok(n, "B=16", {"block": 64, "num_warps": 4}, H200.name, "deploy", 22.25, samples=5),
        MeasurementRow.ok(n, "B=8", {"block": 128, "num_warps": 8}, H200.name, "rank", 1 / 3, samples=2),
        MeasurementRow.failed(s, "B=8", {"block": 128, "num_warps": 8}, H200.name, "deploy", "build_error"),
        MeasurementRow.ok(a, "B=8", {"block": 32}, H200.name, "deploy", 3.0, samples=3, source="hand"),
        MeasurementRow.ok(b, "B=8", {"block": 32}, H200.name, "deploy", 4.0, samples=3),
        MeasurementRow.ok(n, "B=8", {"block": 64, "num_warps": 4}, H100.name, "deploy", 14.0, samples=5),
        MeasurementRow.ok(n, "B=8", {"tile_m": 8, "threads": 2}, CPU.name, "deploy", 900.0, samples=4),
    ]
    store.record(rows, kernels=KERNELS, cards=[H200, H100, CPU],
                 routing=[RoutingRow(m, "split:K=2", 0, a), RoutingRow(m, "split:K=2", 1, b)],
                 goldens=[GoldenRow(n, "B=8", H200.name, "deploy", knobs={"block": 64, "num_warps": 4}),
                          GoldenRow(m, "", H200.name, "deploy", decision="split:K=2"),
                          GoldenRow(s, "B=8", H200.name, "deploy", knobs={"block": 256, "num_warps": 8})])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "src.db"
    with open_store(path, "w") as s:
        populate(s)
    return path


def stats_of(path: Path) -> dict:
    out = db_stats(path)
    out.pop("path", None)
    return out


def test_freezing_the_same_database_twice_gives_byte_identical_files(db: Path, tmp_path: Path) -> None:
    first = freeze_db(db, tmp_path / "one")
    second = freeze_db(db, tmp_path / "two")
    assert [p.name for p in first] == ["amd-epyc-avx-512-x2.json", "nvidia-h100-80gb-hbm3.json", "nvidia-h200.json"]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes()
        text = a.read_text()
        assert text.endswith("}\n") and text.startswith('{"format":"emmy-freeze","version":1,')
        assert json.loads(text)["format"] == "emmy-freeze"


def test_freezing_again_into_the_same_folder_leaves_unchanged_files_untouched(db: Path, tmp_path: Path) -> None:
    """A refresh that changes nothing moves nothing: same inode, same modification time; a changed card is
    replaced, and every path is returned either way."""
    first = freeze_db(db, tmp_path / "out")
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in first}
    again = freeze_db(db, tmp_path / "out")
    assert again == first
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in again} == before
    changed = first[-1]
    changed.write_text(changed.read_text().replace('"samples":', '"samples": ', 1))  # same content, other bytes
    stale = changed.stat().st_ino
    freeze_db(db, tmp_path / "out")
    assert changed.stat().st_ino != stale
    assert changed.read_bytes() == freeze_db(db, tmp_path / "check")[-1].read_bytes()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_freeze_import_freeze_is_byte_identical(db: Path, tmp_path: Path) -> None:
    files = freeze_db(db, tmp_path / "one")
    outcomes = import_db(tmp_path / "fresh.db", files, fresh=True)
    assert all(o.ok for o in outcomes), [o.message for o in outcomes]
    again = freeze_db(tmp_path / "fresh.db", tmp_path / "two")
    assert [p.read_bytes() for p in files] == [p.read_bytes() for p in again]
    assert stats_of(tmp_path / "fresh.db") == stats_of(db)


def test_the_duckdb_and_memory_stores_freeze_to_the_same_bytes(db: Path) -> None:
    mem = MemoryStore()
    populate(mem)
    with open_store(db, "r") as duck:
        for card in (H200.name, H100.name, CPU.name):
            assert render_snapshot(snapshot(mem, card)) == render_snapshot(snapshot(duck, card))


def test_a_frozen_kernel_is_its_text_with_no_identity_or_feature_beside_it(db: Path, tmp_path: Path) -> None:
    (h200,) = freeze_db(db, tmp_path, H200.name)
    text = h200.read_text()
    assert not re.search(r"[0-9a-f]{64}", text), "no identity (nor any digest) is stored in a freeze"
    doc = json.loads(text)
    for k in doc["kernels"]:
        assert set(k) == {"c_name", "goldens", "program", "rows"}
    assert {k["program"] for k in doc["kernels"]} == {render(k) for k in KERNELS}


def test_a_freeze_holds_the_decisions_that_reach_its_kernels(db: Path, tmp_path: Path) -> None:
    doc = json.loads(freeze_db(db, tmp_path, H200.name)[0].read_text())
    programs = [k["program"] for k in doc["kernels"]]
    (dec,) = doc["decisions"]
    assert programs[dec["parent"]] == render(MM) and dec["decision"] == "split:K=2"
    assert [programs[p["kernel"]] for p in dec["pieces"]] == [render(PIECE_A), render(PIECE_B)]
    h100 = json.loads(freeze_db(db, tmp_path, H100.name)[0].read_text())
    assert h100["decisions"] == [] and [k["program"] for k in h100["kernels"]] == [render(NORM)]


def test_a_freeze_says_which_rows_are_golden(db: Path, tmp_path: Path) -> None:
    doc = json.loads(freeze_db(db, tmp_path, H200.name)[0].read_text())
    by_text = {k["program"]: k for k in doc["kernels"]}
    norm = by_text[render(NORM)]
    golden = [r for r in norm["rows"] if r.get("golden")]
    assert len(golden) == 1 and golden[0]["sizes"] == "B=8" and golden[0]["setting"] == "deploy"
    assert by_text[render(MM)]["goldens"] == [{"decision": "split:K=2", "setting": "deploy", "sizes": ""}]
    # a golden whose schedule was never measured is listed on its kernel, not lost
    assert by_text[render(SOFT)]["goldens"] == [{"knobs": {"block": 256, "num_warps": 8}, "setting": "deploy",
                                                 "sizes": "B=8"}]


def test_rows_are_sorted_and_numbers_have_one_spelling(db: Path, tmp_path: Path) -> None:
    doc = json.loads(freeze_db(db, tmp_path, H200.name)[0].read_text())
    for k in doc["kernels"]:
        keys = [(r["sizes"], r["setting"], json.dumps(r["knobs"], sort_keys=True, separators=(",", ":")))
                for r in k["rows"]]
        assert keys == sorted(keys)
    text = freeze_db(db, tmp_path, H200.name)[0].read_text()
    assert '"median_us":0.3333333333333333' in text  # shortest round-trip form
    assert '"median_us":1000000000.0' in text  # the failed row's placeholder


def test_hand_run_measurements_are_recorded_too(db: Path, tmp_path: Path) -> None:
    """Seed 09: hand-found optima are not lost: they travel through a freeze with their source."""
    files = freeze_db(db, tmp_path / "f")
    mem = MemoryStore()
    assert all(o.ok for o in import_into(mem, files))
    hand = [m for m in mem.measurements() if m.source == "hand"]
    assert len(hand) == 1 and hand[0].kernel_id == kernel_id(PIECE_A) and hand[0].median_us == 3.0


def test_import_recomputes_identity_from_text_so_a_new_identity_version_rekeys(
        db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = freeze_db(db, tmp_path / "f")
    old = set(ids())
    monkeypatch.setattr(identity, "IDENTITY_VERSION", identity.IDENTITY_VERSION + 1)
    new = set(ids())
    assert not old & new
    mem = MemoryStore()
    assert all(o.ok for o in import_into(mem, files))
    assert set(mem.kernels()) == new
    assert {m.kernel_id for m in mem.measurements()} <= new and len(mem.measurements()) == 8
    assert {(r.parent_id, r.piece_id) for r in mem.routing()} == {
        (kernel_id(MM), kernel_id(PIECE_A)), (kernel_id(MM), kernel_id(PIECE_B))}
    assert {g.kernel_id for g in mem.goldens()} == {kernel_id(NORM), kernel_id(MM), kernel_id(SOFT)}
    # and the re-keyed store freezes to the same bytes: a freeze holds no identity
    refrozen = freeze_store(mem, tmp_path / "g")
    assert [p.read_bytes() for p in refrozen] == [p.read_bytes() for p in files]


def test_freeze_of_one_card_only(db: Path, tmp_path: Path) -> None:
    paths = freeze_db(db, tmp_path, CPU.name)
    assert [p.name for p in paths] == ["amd-epyc-avx-512-x2.json"]
    doc = json.loads(paths[0].read_text())
    assert doc["card"]["name"] == CPU.name and doc["card"]["target"] == "cpu"
    assert [r["knobs"] for k in doc["kernels"] for r in k["rows"]] == [{"threads": 2, "tile_m": 8}]


_KNOBS = st.fixed_dictionaries({"block": st.sampled_from([16, 64, 1024])},
                               optional={"num_warps": st.sampled_from([1, 4, 32]), "num_stages": st.integers(1, 8),
                                         "acc": st.sampled_from(["f32", "f16"])})
_ROW = st.tuples(st.integers(0, len(KERNELS) - 1), st.sampled_from(["B=1", "B=8", "B=4096"]),
                 st.sampled_from(["deploy", "rank"]), _KNOBS,
                 st.one_of(st.floats(1e-3, 1e8, allow_nan=False), st.none()),  # None: a failure
                 st.one_of(st.none(), st.floats(0, 10, allow_nan=False)), st.integers(1, 1000),
                 st.sampled_from(["tune", "hand", "import"]))


@settings(max_examples=40, deadline=None)
@given(st.lists(_ROW, max_size=30), st.lists(st.tuples(st.integers(0, len(KERNELS) - 1), _KNOBS), max_size=3))
def test_any_store_freezes_imports_and_freezes_again_to_the_same_bytes(rows: list, goldens: list) -> None:
    mem = MemoryStore()
    kid = ids()
    mem.record([MeasurementRow.failed(kid[k], s, kn, H200.name, st_, "timeout") if med is None else
                MeasurementRow.ok(kid[k], s, kn, H200.name, st_, med, spread=sp, samples=n, source=src)
                for k, s, st_, kn, med, sp, n, src in rows], kernels=KERNELS, cards=[H200],
               goldens=[GoldenRow(kid[k], "B=8", H200.name, "deploy", knobs=kn) for k, kn in goldens])
    text = render_snapshot(snapshot(mem, H200.name))
    back = MemoryStore()
    back.write(parse_card_document(json.loads(text), "prop.json").batch)
    assert render_snapshot(snapshot(back, H200.name)) == text
    strip = [(m.kernel_id, m.sizes, m.schedule_id, m.status, m.failure, m.median_us, m.spread, m.samples, m.source)
             for m in mem.measurements()]
    assert strip == [(m.kernel_id, m.sizes, m.schedule_id, m.status, m.failure, m.median_us, m.spread, m.samples,
                      m.source) for m in back.measurements()]
    assert back.goldens() == mem.goldens()


def test_freeze_of_a_card_depends_on_its_own_rows_only() -> None:
    """Issue 9, item 5: another card's tune coming first changed a card's `dyn(128)` to `dyn(1024)`."""
    small, big = rmsnorm(64, batch_hint=128), rmsnorm(64, batch_hint=1024)
    piece_small, piece_big = softmax(32, batch_hint=128), softmax(32, batch_hint=1024)
    assert kernel_id(small) == kernel_id(big) and render(small) != render(big)
    kid, pid, mid = kernel_id(small), kernel_id(piece_small), kernel_id(MM)

    def h200(store: MeasurementStore) -> None:
        store.record([MeasurementRow.ok(kid, "B=128", {"block": 64}, H200.name, "deploy", 3.0),
                      MeasurementRow.ok(kid, "B=16", {"block": 64}, H200.name, "rank", 3.0)],
                     kernels=[small, piece_small, MM], cards=[H200],
                     routing=[RoutingRow(mid, "split:K=2", 0, pid)],
                     goldens=[GoldenRow(kid, "B=128", H200.name, "deploy", knobs={"block": 64}),
                              GoldenRow(mid, "", H200.name, "deploy", decision="split:K=2")])

    def h100(store: MeasurementStore) -> None:
        store.record([MeasurementRow.ok(kid, "B=1024", {"block": 64}, H100.name, "deploy", 9.0),
                      MeasurementRow.ok(pid, "B=1024", {"block": 32}, H100.name, "deploy", 1.0)],
                     kernels=[big, piece_big, MM], cards=[H100], routing=[RoutingRow(mid, "split:K=2", 0, pid)])

    texts = []
    for order in ((h200, h100), (h100, h200)):
        mem = MemoryStore()
        for fill in order:
            fill(mem)
        texts.append(render_snapshot(snapshot(mem, H200.name)))
    assert texts[0] == texts[1]
    programs = [k["program"] for k in json.loads(texts[0])["kernels"]]
    assert render(small) in programs  # B's hint is the card's own most common size (128 twice, 16 once)
    assert render(piece_small) in programs  # a piece with no row of its own takes the card's size of B


def test_freeze_never_writes_over_a_file_of_another_kind_or_card(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "fz"
    out.mkdir()
    precious = out / "nvidia-h200.json"
    for content, what in ((b"my notes", "not a file Emmy writes"),
                          (b'{"format":"emmy-tune","version":1,\n"card":{"name":"NVIDIA H200"},\n"kernels":[]}\n',
                           "a tune file"),
                          (b'{"format":"emmy-freeze","version":1,\n"card":{"name":"NVIDIA H100 80GB HBM3"},\n"x":1}',
                           "a freeze of card 'NVIDIA H100 80GB HBM3'")):
        precious.write_bytes(content)
        with pytest.raises(FileWriteError, match=what):
            freeze_db(db, out)
        assert precious.read_bytes() == content and sorted(p.name for p in out.iterdir()) == [precious.name]
    precious.unlink()
    first = freeze_db(db, out)
    assert [p.read_bytes() for p in freeze_db(db, out)] == [p.read_bytes() for p in first]  # its own: replaced
