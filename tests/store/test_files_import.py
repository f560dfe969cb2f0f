"""Import is strict and transactional: malformed sources are refused naming file, record and field, and
leave `emmy db stats` exactly as it was; good sources beside a bad one still go in."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.exchange.importer import import_db
from emmy_core.fileio.sourcefile import SourceError, load_json_file, read_bounded
from emmy_core.formats.freeze import freeze_db
from emmy_core.ir import identity, kernel_id
from emmy_core.store import BatchError, MeasurementRow, StoreError, open_store
from tests.store.test_files_freeze import NORM, populate, stats_of


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "target.db"
    with open_store(path, "w") as s:
        populate(s)
    return path


@pytest.fixture
def freeze_doc(db: Path, tmp_path: Path) -> dict:
    (path,) = freeze_db(db, tmp_path / "fz", "NVIDIA H200")
    return json.loads(path.read_text())


def write(tmp_path: Path, name: str, doc: object) -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def refused(db: Path, source: Path, *must: str, **kw: object) -> str:
    """Imports `source` into `db`, asserts it was refused with nothing written, returns the message."""
    before = stats_of(db)
    (outcome,) = import_db(db, [source], **kw)  # type: ignore[arg-type]
    assert not outcome.ok, outcome.message
    assert stats_of(db) == before
    assert str(source) in outcome.message
    for text in must:
        assert text in outcome.message, outcome.message
    return outcome.message


def kt_cache(device: str = "NVIDIA GeForce RTX 3090") -> dict:
    return {"device_name": device, "kernel_name": "vector_add", "problem_size": [1024],
            "tune_params_keys": ["block_size_x"], "tune_params": {"block_size_x": [32, 64, 128]},
            "objective": "time",
            "cache": {"32": {"block_size_x": 32, "time": 1.5, "times": [1.0, 2.0, 1.5]},
                      "64": {"block_size_x": 64, "time": "CompilationFailedConfig"},
                      "128": {"block_size_x": 128, "time": 0.5, "times": [0.5, 0.5, 0.75, 0.25]}}}


def test_truncated_json_is_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    text = json.dumps(freeze_doc)
    refused(db, write(tmp_path, "cut.json", text[: len(text) // 2]), "not valid JSON")


def test_a_json_error_reads_once_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"not valid JSON: Unterminated string starting at line 2 column 7$"):
        load_json_file(write(tmp_path, "cut.json", '{"a": 1,\n "b": "never closed'))


def test_a_wrong_type_is_refused_naming_record_and_field(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    freeze_doc["kernels"][1]["rows"][0]["median_us"] = "fast"
    refused(db, write(tmp_path, "types.json", freeze_doc), "$.kernels[1].rows[0].median_us", "must be a number")


def test_nothing_migrates_an_unknown_format_version_is_refused_naming_both(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    freeze_doc["version"] = 2
    refused(db, write(tmp_path, "v2.json", freeze_doc), "$.version", "version 2", "reads emmy-freeze version 1")


def test_a_body_that_does_not_parse_is_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    freeze_doc["kernels"][0]["program"] = freeze_doc["kernels"][0]["program"].replace("axis", "axes", 1)
    refused(db, write(tmp_path, "body.json", freeze_doc), "$.kernels[0].program", "does not parse")


def test_a_knob_outside_the_vocabulary_is_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    freeze_doc["kernels"][1]["rows"][0]["knobs"]["block"] = 48
    refused(db, write(tmp_path, "pow2.json", freeze_doc), "$.kernels[1].rows[0].knobs.block", "power of two")
    freeze_doc["kernels"][1]["rows"][0]["knobs"] = {"warp_magic": 3}
    refused(db, write(tmp_path, "unknown.json", freeze_doc), "knobs.warp_magic", "unknown knob")


def test_a_row_spelling_a_split_is_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    freeze_doc["kernels"][1]["rows"][0]["knobs"] = {"block": 64, "split": "split:K=2"}
    refused(db, write(tmp_path, "split.json", freeze_doc), "$.kernels[1].rows[0].knobs", "structural decision")


def test_one_bad_row_at_the_end_refuses_the_whole_source(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    last = freeze_doc["kernels"][-1]["rows"][-1]
    last["status"] = "great"
    refused(db, write(tmp_path, "last.json", freeze_doc), "status", "is not ok or failed")


def test_unknown_fields_repeated_keys_nan_and_vocab_are_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    refused(db, write(tmp_path, "extra.json", {**freeze_doc, "comment": 1}), "$.comment", "unknown field")
    refused(db, write(tmp_path, "dup.json", '{"format": "emmy-freeze", "format": "emmy-tune"}'), "repeated")
    refused(db, write(tmp_path, "nan.json", json.dumps(freeze_doc).replace('"median_us":', '"median_us": NaN, "x":', 1)),
            "NaN")
    refused(db, write(tmp_path, "vocab.json", {**freeze_doc, "knob_vocab": 99}), "$.knob_vocab", "version 1")


def test_an_empty_device_name_is_refused_unless_a_card_is_given(db: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "empty.json", kt_cache(device=""))
    refused(db, path, "$.device_name", "--card")
    (ok,) = import_db(db, [path], card="NVIDIA GeForce RTX 3090")
    assert ok.ok, ok.message
    with open_store(db, "r") as s:
        assert len(s.measurements(card="NVIDIA GeForce RTX 3090")) == 3


def test_a_kernel_tuner_timestamp_becomes_the_measurement_time(db: Path, tmp_path: Path) -> None:
    doc = kt_cache()
    doc["cache"]["32"]["timestamp"] = "2023-01-24 01:03:17.677311+00:00"
    (ok,) = import_db(db, [write(tmp_path, "when.json", doc)])
    assert ok.ok, ok.message
    with open_store(db, "r") as s:
        times = {m.median_us: m.measured_at for m in s.measurements(card="NVIDIA GeForce RTX 3090")}
    assert times[1500.0].isoformat() == "2023-01-24T01:03:17.677311"


def test_kernel_tuner_entries_are_checked(db: Path, tmp_path: Path) -> None:
    doc = kt_cache()
    doc["cache"]["32"]["time"] = "TimeoutConfig"
    refused(db, write(tmp_path, "kind.json", doc), '$.cache["32"].time', "TimeoutConfig")
    doc = kt_cache()
    doc["cache"]["32"]["block_size_x"] = 48
    refused(db, write(tmp_path, "value.json", doc), "block_size_x", "admissible")
    doc = kt_cache()
    doc["cache"]["33"] = doc["cache"].pop("32")
    refused(db, write(tmp_path, "key.json", doc), '$.cache["33"]', "does not spell")
    doc = kt_cache()
    doc["cache"]["32"]["timestamp"] = "yesterday"
    refused(db, write(tmp_path, "when.json", doc), '$.cache["32"].timestamp', "ISO 8601")
    doc = kt_cache()
    doc["tune_params_keys"] = ["split_k"]
    doc["tune_params"] = {"split_k": [1, 2]}
    refused(db, write(tmp_path, "splitk.json", doc), "$.tune_params", "structural decision")


def test_a_gzip_bomb_is_refused_at_the_cap_while_streaming(tmp_path: Path, db: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        block = b" " * (1 << 20)
        for _ in range(64):  # 64 MiB of blanks, about 64 KiB compressed
            fh.write(block)
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(SourceError, match="exceeds the cap of 8388608 bytes"):
        read_bounded(bomb, 8 << 20)
    refused(db, bomb, "gzip bomb", max_bytes=8 << 20)


def test_a_file_over_the_cap_is_refused_before_it_is_parsed(tmp_path: Path, db: Path) -> None:
    path = write(tmp_path, "big.json", '{"format": "' + "x" * (2 << 20) + '"}')
    refused(db, path, "over the cap", max_bytes=1 << 20)


def test_a_huge_cap_reads_a_small_file_without_setting_aside_memory_for_the_cap(tmp_path: Path) -> None:
    """A cap of 1 TiB once allocated 1 TiB before reading a byte (MemoryError); memory follows the file."""
    path = write(tmp_path, "small.json", '{"format": "x"}')
    assert read_bounded(path, 1 << 40) == b'{"format": "x"}'
    packed = tmp_path / "small.json.gz"
    packed.write_bytes(gzip.compress(b'{"format": "x"}'))
    assert read_bounded(packed, 1 << 40) == b'{"format": "x"}'
    with pytest.raises(SourceError, match="over the cap of 8"):
        read_bounded(path, 8)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs /proc (a file whose size reads 0)")
def test_a_file_holding_more_than_its_size_says_is_still_refused_at_the_cap() -> None:
    """A /proc file is a regular file of size 0 that reads many bytes: what is read, not the size, is capped."""
    assert b"Name:" in read_bounded("/proc/self/status", 1 << 40)
    with pytest.raises(SourceError, match="over the cap of 16 bytes"):
        read_bounded("/proc/self/status", 16)


@pytest.mark.parametrize("max_mb", ["0", "-5", "99999999999999999999"])
def test_import_max_mb_of_zero_negative_or_absurd_is_refused_before_a_database_is_made(tmp_path: Path,
                                                                                        max_mb: str) -> None:
    source = write(tmp_path, "kt.json", kt_cache())
    target = tmp_path / "new.db"
    result = CliRunner().invoke(app, ["db", "import", "--db", str(target), "--max-mb", max_mb, str(source)])
    assert result.exit_code == 2, result.output
    assert "--max-mb" in result.output and "Traceback" not in result.output, result.output
    assert not any(tmp_path.glob("new.db*"))


def test_a_100_mb_string_is_refused(tmp_path: Path, db: Path, freeze_doc: dict) -> None:
    freeze_doc["kernels"][0]["program"] = "@"
    head, tail = json.dumps(freeze_doc).split('"@"')
    path = tmp_path / "string.json"
    with path.open("w") as fh:
        fh.write(head + '"')
        block = "k" * (1000 * 1000)
        for _ in range(100):
            fh.write(block)
        fh.write('"' + tail)
    refused(db, path, "$.kernels[0].program", "100000000 characters is longer than")


def test_the_command_says_which_sources_went_in_and_exits_non_zero(db: Path, tmp_path: Path,
                                                                   freeze_doc: dict) -> None:
    good = write(tmp_path, "good.json", kt_cache())
    bad = write(tmp_path, "bad.json", {**freeze_doc, "version": 7})
    result = CliRunner().invoke(app, ["db", "import", "--db", str(tmp_path / "new.db"), str(good), str(bad)])
    assert result.exit_code != 0
    assert f"imported {good} (kerneltuner)" in result.output
    assert f"refused: {bad}" in result.output and "1 of 2 sources refused" in result.output
    with open_store(tmp_path / "new.db", "r") as s:
        assert len(s.measurements()) == 3


def test_another_tuning_database_imports(db: Path, tmp_path: Path) -> None:
    (outcome,) = import_db(tmp_path / "copy.db", [db])
    assert outcome.ok and outcome.kind == "database", outcome.message
    assert stats_of(tmp_path / "copy.db") == stats_of(db)
    files = freeze_db(db, tmp_path / "a")
    assert [p.read_bytes() for p in files] == [p.read_bytes() for p in freeze_db(tmp_path / "copy.db", tmp_path / "b")]


def test_nothing_migrates_a_database_of_another_identity_version_is_refused_naming_both(
        db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "IDENTITY_VERSION", identity.IDENTITY_VERSION + 1)
    (outcome,) = import_db(tmp_path / "other.db", [db])
    assert not outcome.ok and "identity version 1" in outcome.message and "identity version 2" in outcome.message


def test_a_database_cannot_import_itself(db: Path) -> None:
    refused(db, db, "being imported into")


def test_an_identity_in_a_database_is_never_trusted(db: Path, tmp_path: Path) -> None:
    import duckdb

    fake = "f" * 64
    real = kernel_id(NORM)
    con = duckdb.connect(str(db))
    for statement in ("UPDATE kernels SET kernel_id = ? WHERE kernel_id = ?",
                      "UPDATE measurements SET kernel_id = ? WHERE kernel_id = ?",
                      "UPDATE goldens SET kernel_id = ? WHERE kernel_id = ?"):
        con.execute(statement, [fake, real])
    con.close()
    (outcome,) = import_db(tmp_path / "copy.db", [db])
    assert outcome.ok, outcome.message
    with open_store(tmp_path / "copy.db", "r") as s:
        assert fake not in s.kernels() and real in s.kernels()
        assert len(s.measurements(kernel_id=real)) == 5 and not s.measurements(kernel_id=fake)


def test_fresh_import_with_a_refused_source_leaves_the_old_database_byte_for_byte(db: Path, tmp_path: Path) -> None:
    """Issue 9, item 2: `--fresh` deleted the database before reading any source."""
    before = db.read_bytes()
    good = write(tmp_path, "good.json", kt_cache())
    cut = write(tmp_path, "cut.json", json.dumps(kt_cache())[:100])
    for sources in ([good, cut], [good, tmp_path / "typo.json"]):
        outcomes = import_db(db, sources, fresh=True)
        assert [o.ok for o in outcomes] == [True, False]
        assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # nothing left beside it
    result = CliRunner().invoke(app, ["db", "import", "--db", str(db), "--fresh", str(good), str(cut)])
    assert result.exit_code == 2 and "nothing was swapped in" in result.output and "stands as it was" in result.output
    assert db.read_bytes() == before


def test_fresh_import_swaps_in_a_database_holding_only_the_sources(db: Path, tmp_path: Path) -> None:
    good = write(tmp_path, "good.json", kt_cache())
    (o,) = import_db(db, [good], fresh=True)
    assert o.ok, o.message
    with open_store(db, "r") as s:
        assert s.counts()["measurements"] == 3 and {c.name for c in s.cards()} == {"NVIDIA GeForce RTX 3090"}
    assert not [p for p in tmp_path.iterdir() if ".fresh-" in p.name]


def test_fresh_import_interrupted_leaves_the_old_database_and_no_litter(db: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from emmy_core.exchange import importer

    before = db.read_bytes()
    real = importer.import_into

    def interrupted(*args: object, **kw: object) -> object:
        real(*args, **kw)  # type: ignore[arg-type]
        raise KeyboardInterrupt("the user pressed ^C")

    monkeypatch.setattr(importer, "import_into", interrupted)
    with pytest.raises(KeyboardInterrupt):
        import_db(db, [write(tmp_path, "good.json", kt_cache())], fresh=True)
    assert db.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if ".fresh-" in p.name]


def test_fresh_import_refuses_to_replace_a_file_that_is_not_an_emmy_store(tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "theirs.db"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE results (x INTEGER)")
    con.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not an Emmy store"):
        import_db(path, [write(tmp_path, "good.json", kt_cache())], fresh=True)
    assert path.read_bytes() == before


def test_fresh_import_moves_a_database_of_another_version_aside(db: Path, tmp_path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.close()
    before = db.read_bytes()
    notes: list[str] = []
    (o,) = import_db(db, [write(tmp_path, "good.json", kt_cache())], fresh=True, notify=notes.append)
    assert o.ok, o.message
    aside = tmp_path / "target.schema0-identity1.db"
    assert aside.read_bytes() == before and str(aside) in notes[0]


def test_contradictions_one_key_twice_with_different_times_is_refused(db: Path, tmp_path: Path,
                                                                      freeze_doc: dict) -> None:
    """Issue 9, item 6: the freeze importer accepted contradictions."""
    rows = freeze_doc["kernels"][2]["rows"]
    rows.append({**rows[0], "median_us": rows[0]["median_us"] * 100})
    refused(db, write(tmp_path, "twice.json", freeze_doc), "$.kernels[2].rows[3]", "repeats the key (sizes, setting, knobs) of",
            "$.kernels[2].rows[0]")


def test_contradictions_several_goldens_for_one_pool_are_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    k = freeze_doc["kernels"][2]
    k["goldens"] = [{"knobs": {"block": 128, "num_warps": 8}, "setting": "deploy", "sizes": "B=8"}]
    refused(db, write(tmp_path, "goldens.json", freeze_doc), "$.kernels[2].goldens[0]", "second golden",
            "$.kernels[2].rows[1]")
    k["goldens"] = []
    k["rows"][0]["golden"] = True  # B=16 is its own pool: fine
    k["rows"][2]["sizes"], k["rows"][2]["setting"], k["rows"][2]["golden"] = "B=8", "deploy", True
    refused(db, write(tmp_path, "rows.json", freeze_doc), "$.kernels[2].rows[2]", "second golden")


def test_contradictions_a_kernel_listed_twice_is_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    twin = dict(freeze_doc["kernels"][2])
    twin["program"] = twin["program"].replace("dyn(8)", "dyn(512)", 1)  # same identity: hints are not part of it
    twin["rows"] = []
    freeze_doc["kernels"].append(twin)
    refused(db, write(tmp_path, "kernel.json", freeze_doc), "$.kernels[5].program", "same kernel as $.kernels[2]")


def test_contradictions_a_setting_tune_refuses_is_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    freeze_doc["kernels"][2]["rows"][0]["setting"] = "turbo"
    refused(db, write(tmp_path, "turbo.json", freeze_doc), "$.kernels[2].rows[0].setting", "'turbo'",
            "deploy, rank")
    with open_store(db, "w") as s, pytest.raises(BatchError, match="setting"):
        s.record([MeasurementRow.ok(kernel_id(NORM), "B=8", {"block": 64}, "NVIDIA H200", "turbo", 1.0)])


def test_contradictions_a_decision_listed_twice_is_refused(db: Path, tmp_path: Path, freeze_doc: dict) -> None:
    freeze_doc["decisions"].append(dict(freeze_doc["decisions"][0]))
    refused(db, write(tmp_path, "decision.json", freeze_doc), "$.decisions[1]", "listed twice")


@pytest.mark.parametrize("time", [-1.5, 0, "1e999"])
def test_kernel_tuner_a_time_that_is_not_a_positive_finite_number_is_refused(db: Path, tmp_path: Path,
                                                                            time: object) -> None:
    """Issue 9, item 7: a negative, zero or overflowing `time` was accepted (the median comes from `times`)."""
    text = json.dumps(kt_cache()).replace('"time": 1.5', f'"time": {time}')
    refused(db, write(tmp_path, "time.json", text), '$.cache["32"].time', "positive, finite")


def test_kernel_tuner_a_time_that_is_not_the_mean_of_its_times_is_counted(db: Path, tmp_path: Path) -> None:
    doc = kt_cache()
    doc["cache"]["32"]["time"] = 1.75  # the mean of [1.0, 2.0, 1.5] is 1.5
    (o,) = import_db(db, [write(tmp_path, "mean.json", doc)])
    assert o.ok and "1 working entries whose time is not the mean of their times" in o.message, o.message
    (o,) = import_db(db, [write(tmp_path, "fine.json", kt_cache())])
    assert o.ok and "not the mean" not in o.message


def test_error_messages_are_bounded_a_20_mb_knob_name_gives_a_short_message(db: Path, tmp_path: Path,
                                                                            freeze_doc: dict) -> None:
    """Issue 9, item 8: a 20 MB knob name gave a 20 MB error message."""
    huge = "q" * (20 * 1024 * 1024)
    freeze_doc["kernels"][2]["rows"][0]["knobs"][huge] = 1
    message = refused(db, write(tmp_path, "knob.json", freeze_doc), "$.kernels[2].rows[0]", "knobs.qqqq")
    assert len(message) < 1000
    cache = kt_cache()
    cache["cache"][huge] = {}
    assert len(refused(db, write(tmp_path, "key.json", cache), "$.cache")) < 1000
    with open_store(db, "w") as s, pytest.raises(BatchError) as err:
        s.record([MeasurementRow.ok(kernel_id(NORM), "B=8", {huge: 1}, "NVIDIA H200", "deploy", 1.0)], origin=huge)
    assert len(str(err.value)) < 3000
