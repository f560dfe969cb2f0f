"""The writer's rules (DESIGN section 7, seed 09), one test per rule, run against both store implementations."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from emmy_core.graph.forks import ForkKey
from emmy_core.store import (
    PLACEHOLDER_US,
    BatchError,
    CardRow,
    GoldenRow,
    MeasurementRow,
    MeasurementStore,
    MemoryStore,
    RoutingRow,
    Schedule,
    StoreError,
)
from emmy_core.store.batch import Batch
from tests.store.conftest import (
    ADD,
    ADD_ID,
    ADD_TEXT,
    CPU,
    H100,
    H200,
    KNOBS_A,
    KNOBS_B,
    MUL_ID,
    SUB_ID,
    open_fresh,
)


def ok(median: float, *, card: str = H200, knobs: dict = KNOBS_A, sizes: str = "B=8", setting: str = "deploy",
       kernel: str = ADD_ID) -> MeasurementRow:
    return MeasurementRow.ok(kernel, sizes, knobs, card, setting, median, samples=5, spread=0.01)


def failed(*, card: str = H200, knobs: dict = KNOBS_A, kind: str = "timeout") -> MeasurementRow:
    return MeasurementRow.failed(ADD_ID, "B=8", knobs, card, "deploy", kind)


def only(store: MeasurementStore):  # type: ignore[no-untyped-def]
    rows = store.measurements()
    assert len(rows) == 1, rows
    return rows[0]


def test_card_name_is_part_of_the_key(store: MeasurementStore) -> None:
    store.record([ok(10.0, card=H100), ok(12.0, card=H200)])
    rows = store.measurements()
    assert [(r.card, r.median_us) for r in rows] == [(H100, 10.0), (H200, 12.0)]


def test_sizes_are_part_of_the_key(store: MeasurementStore) -> None:
    store.record([ok(10.0, sizes="B=8"), ok(30.0, sizes="B=32")])
    assert sorted((r.sizes, r.median_us) for r in store.measurements()) == [("B=32", 30.0), ("B=8", 10.0)]


def test_setting_and_knobs_are_part_of_the_key(store: MeasurementStore) -> None:
    store.record([ok(10.0), ok(11.0, setting="rank"), ok(12.0, knobs=KNOBS_B)])
    assert len(store.measurements()) == 3


def test_failure_then_success_keeps_the_success(store: MeasurementStore) -> None:
    store.record([failed()])
    store.record([ok(20.0)])
    row = only(store)
    assert (row.status, row.median_us, row.failure) == ("ok", 20.0, None)


def test_success_then_failure_keeps_the_success(store: MeasurementStore) -> None:
    store.record([ok(20.0)])
    summary = store.record([failed(kind="crash")])
    row = only(store)
    assert (row.status, row.median_us) == ("ok", 20.0)
    assert (summary.inserted, summary.replaced, summary.ignored) == (0, 0, 1)


def test_better_after_worse_replaces(store: MeasurementStore) -> None:
    store.record([ok(20.0)])
    summary = store.record([ok(15.0)])
    assert only(store).median_us == 15.0
    assert (summary.inserted, summary.replaced) == (0, 1)


def test_worse_after_better_is_ignored(store: MeasurementStore) -> None:
    store.record([ok(15.0)])
    store.record([ok(20.0)])
    assert only(store).median_us == 15.0


def test_failure_is_kept_with_the_placeholder_time(store: MeasurementStore) -> None:
    store.record([failed(kind="build_error")])
    row = only(store)
    assert (row.status, row.failure, row.median_us, row.samples) == ("failed", "build_error", PLACEHOLDER_US, 0)


def test_a_later_failure_does_not_replace_an_earlier_one(store: MeasurementStore) -> None:
    store.record([failed(kind="timeout")])
    store.record([failed(kind="crash")])
    assert only(store).failure == "timeout"


@pytest.mark.parametrize("knobs", [
    {"block": 64, "split_k": 4},
    {"block": 64, "split": "K=4"},
    {"block": 64, "cut": "epilogue"},
    {"block": 64, "extern.split_k": 2},
    {"block": 64, "mode": "split:K=2"},
])
def test_row_spelling_a_split_or_cut_is_refused_and_nothing_is_written(store: MeasurementStore, knobs: dict) -> None:
    before = store.counts()
    bad = MeasurementRow.ok(ADD_ID, "B=8", knobs, H200, "deploy", 5.0, samples=3)
    with pytest.raises(BatchError, match="structural decision"):
        store.record([ok(10.0), ok(11.0, knobs=KNOBS_B), bad], kernels=[ADD])
    assert store.counts() == before
    assert store.measurements() == []


def test_schedule_is_stored_once_and_shared_by_digest(store: MeasurementStore) -> None:
    same = dict(reversed(list(KNOBS_A.items())))  # the same assignment, keys in another order
    summary = store.record([ok(10.0, card=H100), ok(11.0, card=H200, knobs=same), ok(12.0, kernel=MUL_ID)])
    assert summary.schedules_added == 1
    assert store.counts()["schedules"] == 1
    sid = Schedule(KNOBS_A).schedule_id
    assert {r.schedule_id for r in store.measurements()} == {sid}
    assert store.knobs(sid) == KNOBS_A


def test_batch_is_one_transaction(store: MeasurementStore) -> None:
    before = store.counts()
    new_card = CardRow("NVIDIA A100-SXM4-80GB", "cuda", {"sm_count": 108})
    rows = [ok(10.0), ok(11.0, card="NVIDIA A100-SXM4-80GB"),
            MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", float("nan"), samples=3)]
    with pytest.raises(BatchError, match="measurement 2"):
        store.record(rows, kernels=[ADD_TEXT.replace("ew_add", "ew_new")], cards=[new_card])
    assert store.counts() == before


def test_a_reference_that_does_not_resolve_is_refused(store: MeasurementStore) -> None:
    with pytest.raises(BatchError, match="neither in this batch nor stored"):
        store.record([ok(10.0, kernel="f" * 64)])
    assert store.measurements() == []


def test_a_card_with_no_description_is_refused(store: MeasurementStore) -> None:
    with pytest.raises(BatchError, match="not described"):
        store.record([ok(10.0, card="NVIDIA B200")])


def test_knobs_of_the_other_targets_vocabulary_are_refused(store: MeasurementStore) -> None:
    with pytest.raises(BatchError, match="cuda vocabulary, not cpu"):
        store.record([ok(10.0, card=CPU, knobs=KNOBS_A)])
    store.record([ok(10.0, card=CPU, knobs={"tile_m": 32, "threads": 2})])
    assert only(store).card == CPU


def test_unknown_knob_is_refused(store: MeasurementStore) -> None:
    with pytest.raises(BatchError, match="unknown knob"):
        store.record([ok(10.0, knobs={"blok": 64})])


@pytest.mark.parametrize(("field", "value", "message"), [
    ("sizes", "S=512,B=8", "not canonical"),
    ("setting", "has space", "setting"),
    ("source", "guess", "source"),
    ("samples", 0, "at least one sample"),
    ("median_us", -1.0, "median_us"),
    ("kernel_id", "ABC", "kernel identity"),
])
def test_error_names_the_origin_the_record_and_the_field(store: MeasurementStore, field: str, value: object,
                                                         message: str) -> None:
    fields = {"kernel_id": ADD_ID, "sizes": "B=8", "knobs": KNOBS_A, "card": H200, "setting": "deploy",
              "status": "ok", "median_us": 3.0, "samples": 2, "source": "tune"}
    fields[field] = value
    with pytest.raises(BatchError) as err:
        store.record([ok(10.0), MeasurementRow(**fields)], origin="freezes/h200.json")
    text = str(err.value)
    assert "freezes/h200.json" in text and "measurement 1" in text and message in text


def test_within_a_batch_the_best_row_of_a_key_wins(store: MeasurementStore) -> None:
    summary = store.record([failed(), ok(20.0), ok(12.0), ok(15.0), failed(kind="crash")])
    assert only(store).median_us == 12.0
    assert (summary.offered, summary.inserted, summary.ignored) == (5, 1, 4)


def test_kernel_text_and_object_have_one_identity(store: MeasurementStore) -> None:
    summary = store.record(kernels=[ADD, ADD_TEXT, ADD_TEXT.replace("dyn(8)", "dyn(512)")])
    assert summary.kernels_added == 0  # already recorded by the fixture; the hint is not part of the identity
    text, c_name = store.kernels()[ADD_ID]
    assert c_name == "ew_add" and text == ADD_TEXT


def test_transaction_writes_every_table_together_or_nothing(store: MeasurementStore) -> None:
    with store.transaction(origin="import-1") as batch:
        new_id = batch.add_kernel(ADD_TEXT.replace("ew_add", "ew_piece"))
        batch.add_card(CardRow("NVIDIA L4", "cuda", {"sm_count": 58}))
        batch.add_measurements([ok(9.0, card="NVIDIA L4", kernel=new_id)])
        batch.add_routing([RoutingRow(ADD_ID, "split:C=2", 0, new_id), RoutingRow(ADD_ID, "split:C=2", 1, MUL_ID)])
        batch.add_goldens([GoldenRow(ADD_ID, "B=8", "NVIDIA L4", "deploy", knobs=KNOBS_A),
                           GoldenRow(SUB_ID, "B=8", "NVIDIA L4", "deploy", decision="cut:epilogue")])
    assert store.last_summary is not None and store.last_summary.kernels_added == 1
    assert [r.piece_id for r in store.routing(ADD_ID)] == [new_id, MUL_ID]
    assert [(g.kernel_id, g.schedule_id is None) for g in store.goldens(card="NVIDIA L4")] == sorted(
        [(ADD_ID, False), (SUB_ID, True)])
    before = store.counts()
    with pytest.raises(RuntimeError), store.transaction() as batch:
        batch.add_card(CardRow("NVIDIA T4", "cuda"))
        batch.add_measurements([ok(1.0)])
        raise RuntimeError("the importer failed half-way")
    assert store.counts() == before


def test_a_golden_names_exactly_one_of_schedule_and_decision(store: MeasurementStore) -> None:
    with pytest.raises(BatchError, match="exactly one"):
        store.record(goldens=[GoldenRow(ADD_ID, "B=8", H200, "deploy", knobs=KNOBS_A, decision="cut:x")])
    with pytest.raises(BatchError, match="not a structural decision"):
        store.record(goldens=[GoldenRow(ADD_ID, "B=8", H200, "deploy", decision="fuse:x")])
    with pytest.raises(BatchError, match="structural decision"):
        store.record(goldens=[GoldenRow(ADD_ID, "B=8", H200, "deploy", knobs={"split_k": 2})])


def test_routing_names_a_decision_and_stored_kernels(store: MeasurementStore) -> None:
    with pytest.raises(BatchError, match="decision"):
        store.record(routing=[RoutingRow(ADD_ID, "block=64", 0, MUL_ID)])
    with pytest.raises(BatchError, match="neither in this batch nor stored"):
        store.record(routing=[RoutingRow(ADD_ID, "cut:seam", 0, "e" * 64)])


def test_cards_keep_their_latest_description(store: MeasurementStore) -> None:
    store.record(cards=[CardRow(H200, "cuda", {"sm_count": 132, "l2_mb": 50})])
    card = store.card(H200)
    assert card is not None and card.numbers == {"sm_count": 132, "l2_mb": 50.0}


def test_fastest_and_lookup_by_measurement_identity(store: MeasurementStore) -> None:
    store.record([ok(12.0), ok(9.0, knobs=KNOBS_B), failed(knobs={"block": 256, "num_warps": 4})])
    best = store.fastest(ForkKey(ADD_ID, "B=8", H200, "deploy"))
    assert best is not None and best.median_us == 9.0 and best.schedule_id == Schedule(KNOBS_B).schedule_id
    got = store.measurement(ADD_ID, "B=8", KNOBS_A, H200, "deploy")
    assert got is not None and got.median_us == 12.0
    assert store.measurement(ADD_ID, "B=8", KNOBS_A, H100, "deploy") is None


def test_measured_at_is_kept_in_utc(store: MeasurementStore) -> None:
    when = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    store.record([MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 3.0, measured_at=when)])
    assert only(store).measured_at == dt.datetime(2026, 5, 1, 10, 0)


def test_both_implementations_agree_on_random_sequences(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same random sequence of batches leaves the same table in memory and in DuckDB."""
    rng = random.Random(7)
    stores = [open_fresh("memory", tmp_path / "m.db"), open_fresh("duckdb", tmp_path / "d.db")]
    for s in stores:
        s.record(kernels=[ADD], cards=[CardRow(H200, "cuda"), CardRow(H100, "cuda")])
    knob_pool = [{"block": b, "num_warps": w} for b in (16, 32, 64) for w in (1, 2)]
    stamp = dt.datetime(2026, 1, 1)
    for _ in range(12):
        rows = []
        for _ in range(rng.randint(1, 40)):
            knobs, card, sizes = rng.choice(knob_pool), rng.choice([H100, H200]), rng.choice(["B=1", "B=8"])
            if rng.random() < 0.3:
                rows.append(MeasurementRow.failed(ADD_ID, sizes, knobs, card, "deploy",
                                                  rng.choice(["timeout", "crash"]), measured_at=stamp))
            else:
                rows.append(MeasurementRow.ok(ADD_ID, sizes, knobs, card, "deploy", rng.choice([1.0, 2.0, 3.0, 4.5]),
                                              samples=rng.randint(1, 9), measured_at=stamp))
        summaries = [s.record(rows) for s in stores]
        assert summaries[0] == summaries[1]
    assert stores[0].measurements() == stores[1].measurements()
    assert stores[0].counts() == stores[1].counts()


def test_a_reader_cannot_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from emmy_core.store import open_store

    with open_store(tmp_path / "r.db", "w") as w:
        w.record(kernels=[ADD])
    with open_store(tmp_path / "r.db", "r") as r, pytest.raises(StoreError, match="open for reading"):
        r.record(kernels=[ADD])


def test_memory_store_is_a_store() -> None:
    s = MemoryStore()
    s.write(Batch("x", [ADD], [CardRow(H200, "cuda")], [ok(1.0)]))
    assert s.counts()["measurements"] == 1


def test_an_extern_kernel_is_stored_by_its_identity_with_extern_knobs(store: MeasurementStore) -> None:
    from emmy_core.ir import Extern, kernel_id

    ext = Extern("matmul_kernel", (4096, 4096), "a" * 64)
    kid = kernel_id(ext)
    store.record([MeasurementRow.ok(kid, "", {"extern.block_size_x": 32, "extern.tile": "4x4"}, H200, "deploy",
                                    80.0, source="import")], kernels=[ext])
    text, c_name = store.kernels()[kid]
    assert c_name == "matmul_kernel" and text.startswith("extern matmul_kernel {")
    assert only(store).source == "import"


def test_importing_the_store_loads_no_database_library() -> None:
    import subprocess
    import sys

    code = ("import sys, emmy_core.store, emmy_core.store.check; "
            "print(sorted(m for m in ('duckdb', 'pyarrow', 'polars') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
