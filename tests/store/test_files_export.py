"""Dataset export: Parquet per table, candidate pools, a manifest with versions, counts and a digest;
read back by import it gives the same store; a reader refuses other versions naming both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emmy_core.exchange.export import export_db, read_export, read_pools, verify_export
from emmy_core.exchange.importer import import_db
from emmy_core.fileio.sourcefile import SourceError
from emmy_core.ir import identity, kernel_id
from emmy_core.knobs import candidates
from emmy_core.knobs.vocab import schedule_id
from emmy_core.store import StoreError, open_store
from tests.store.test_files_freeze import H200, NORM, populate, stats_of


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "src.db"
    with open_store(path, "w") as s:
        populate(s)
    return path


@pytest.fixture
def exported(db: Path, tmp_path: Path) -> Path:
    out = tmp_path / "it's \"odd\" ; DROP TABLE x"
    export_db(db, out)
    return out


def test_an_export_read_back_by_import_gives_the_same_stats(db: Path, exported: Path, tmp_path: Path) -> None:
    (outcome,) = import_db(tmp_path / "back.db", [exported], fresh=True)
    assert outcome.ok and outcome.kind == "export", outcome.message
    assert stats_of(tmp_path / "back.db") == stats_of(db)


def test_the_manifest_names_versions_counts_and_a_digest(db: Path, exported: Path, tmp_path: Path) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["format"] == "emmy-export" and manifest["identity_version"] == identity.IDENTITY_VERSION
    with open_store(db, "r") as s:
        counts = s.counts()
    for table in ("cards", "kernels", "routing", "schedules", "measurements", "goldens"):
        assert manifest["tables"][table]["rows"] == counts[table]
        assert pq.read_table(exported / f"{table}.parquet").num_rows == counts[table]
    tables = read_export(exported)
    assert {n: t.num_rows for n, t in tables.items() if n != "pools"} == {n: counts[n] for n in tables if n != "pools"}
    again = export_db(db, tmp_path / "again")
    assert again["digest"] == manifest["digest"], "the same store exports to the same content"


def test_nothing_migrates_a_reader_refuses_an_export_of_other_versions_naming_both(exported: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = exported / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "schema_version": 999}))
    with pytest.raises(SourceError, match=r"schema version 999.*this Emmy reads.*schema version"):
        verify_export(exported)
    path.write_text(json.dumps(manifest))
    verify_export(exported)
    monkeypatch.setattr(identity, "IDENTITY_VERSION", identity.IDENTITY_VERSION + 1)
    with pytest.raises(SourceError, match=r"identity version 1\b.*identity version 2"):
        verify_export(exported)


def test_a_changed_file_is_refused(exported: Path, db: Path, tmp_path: Path) -> None:
    data = (exported / "measurements.parquet").read_bytes()
    (exported / "measurements.parquet").write_bytes(data[:-20] + bytes(20))
    with pytest.raises(SourceError, match="does not match the manifest"):
        verify_export(exported)
    (outcome,) = import_db(tmp_path / "x.db", [exported])
    assert not outcome.ok and "measurements.parquet" in outcome.message


def test_pools_hold_measured_schedules_and_the_enumerated_candidates(exported: Path) -> None:
    pools = read_pools(exported).to_pylist()
    nid = kernel_id(NORM)
    pool = [p for p in pools if (p["kernel_id"], p["sizes"], p["card"], p["setting"]) == (nid, "B=8", H200.name,
                                                                                           "deploy")]
    options = candidates(NORM, H200.to_card())  # the store's own description of the card, never the host's
    assert len(options) > 1
    ranked = sorted((p for p in pool if p["candidate_rank"] is not None), key=lambda p: p["candidate_rank"])
    assert [p["schedule_id"] for p in ranked] == [schedule_id(o) for o in options]
    measured = [p for p in pool if p["measured"]]
    assert [p["knobs"] for p in measured] == ['{"block":64,"num_warps":4}']
    assert all(p["status"] is None for p in pool if not p["measured"])


def test_export_refuses_to_replace_a_folder_that_is_not_an_export(db: Path, tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(StoreError, match="not an export"):
        export_db(db, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"



@pytest.mark.parametrize("manifest", ['{"name": "my app"}', "old notes", '{"format": "emmy-freeze"}'])
def test_export_refuses_a_folder_whose_manifest_is_not_an_exports_and_deletes_nothing(
        db: Path, tmp_path: Path, manifest: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "manifest.json").write_text(manifest)
    (site / "index.html").write_text("<html>")
    with pytest.raises(StoreError, match="not an export"):
        export_db(db, site)
    assert sorted(p.name for p in site.iterdir()) == ["index.html", "manifest.json"]
    assert (site / "manifest.json").read_text() == manifest


def test_export_refuses_to_replace_an_export_holding_a_users_file_and_names_it(db: Path, exported: Path) -> None:
    (exported / "analysis.md").write_text("my notes")
    before = sorted(p.name for p in exported.iterdir())
    with pytest.raises(StoreError, match=r"also holds analysis\.md, which no export writes"):
        export_db(db, exported)
    assert sorted(p.name for p in exported.iterdir()) == before
    assert (exported / "analysis.md").read_text() == "my notes"
    (exported / "analysis.md").unlink()
    export_db(db, exported)  # an export alone is replaced
    assert sorted(p.name for p in exported.iterdir()) == [n for n in before if n != "analysis.md"]


def test_an_export_through_a_link_replaces_the_folder_it_points_to_and_leaves_nothing_beside_it(
        db: Path, exported: Path, tmp_path: Path) -> None:
    link = tmp_path / "latest"
    link.symlink_to(exported, target_is_directory=True)
    (exported / "pools.parquet").write_bytes(b"stale")
    export_db(db, link)
    assert link.is_symlink() and verify_export(exported)["format"] == "emmy-export"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    (tmp_path / "nowhere").symlink_to(tmp_path / "missing")
    with pytest.raises(StoreError, match="link to nothing"):
        export_db(db, tmp_path / "nowhere")
    assert not (tmp_path / "missing").exists()


def test_an_export_folder_is_readable_by_others(db: Path, tmp_path: Path) -> None:
    export_db(db, tmp_path / "out")
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755


def test_a_table_missing_from_an_export_is_named_not_taken_for_a_concurrent_export(exported: Path) -> None:
    (exported / "kernels.parquet").unlink()
    with pytest.raises(SourceError, match=r"kernels\.parquet.*missing: the manifest lists it"):
        verify_export(exported)


@pytest.mark.parametrize("name", ["cards.parquet", "manifest.json"])
def test_a_folder_in_place_of_an_exports_file_is_refused_by_name(exported: Path, name: str) -> None:
    (exported / name).unlink()
    (exported / name).mkdir()
    with pytest.raises(SourceError, match="not a regular file"):
        read_export(exported)


ROOT = Path(__file__).resolve().parents[2]
FREEZES = sorted((ROOT / "freezes").glob("*.json"))


def _fake_cpu(name: str, cores: int) -> object:
    from emmy_core.targets import Card

    return Card(name=name, target="cpu", arch="x86_64", compute_capability="", tensor_cores=(), source="test",
                cores=cores, l1d_kib=32.0, l2_kib=512.0, l3_kib=16384.0, simd_bits=256, freq_mhz=3000.0)


@pytest.mark.skipif(not FREEZES, reason="no freeze committed in freezes/")
def test_an_export_is_the_same_on_every_host_pools_come_from_the_stores_card_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository freeze exported under two probed CPUs that differ from its card gives the same pools,
    every pool enumerated for the freeze's card as its `cards` row describes it (never `resolve_card`)."""
    from emmy_core.targets import cpu, resolve

    (outcome,) = import_db(tmp_path / "f.db", FREEZES[:1], fresh=True)
    assert outcome.ok, outcome.message
    monkeypatch.setattr(resolve, "_local_gpu_name", lambda: None)
    manifests = []
    for i, host in enumerate((_fake_cpu("Other CPU x4", 4), _fake_cpu("Another CPU x16", 16))):
        monkeypatch.setattr(cpu, "probe_cpu", lambda host=host: host)
        monkeypatch.setattr(resolve, "probe_cpu", lambda host=host: host)
        assert resolve.resolve_card("local").name == host.name  # type: ignore[attr-defined]
        manifests.append(export_db(tmp_path / "f.db", tmp_path / f"out{i}"))
    a, b = (m["tables"]["pools"] for m in manifests)
    assert a["sha256"] == b["sha256"] and manifests[0]["digest"] == manifests[1]["digest"]
    assert a["candidates"]["unknown_card"] == 0 and a["candidates"]["enumerated"] == a["candidates"]["pools"] > 0
    with open_store(tmp_path / "f.db", "r") as s:
        (row,) = s.cards()
        kernels = s.kernels()
    from emmy_core.ir import parse

    pools = read_pools(tmp_path / "out0").to_pylist()
    kid = sorted({p["kernel_id"] for p in pools})[0]
    ranked = sorted({(p["candidate_rank"], p["schedule_id"]) for p in pools
                     if p["kernel_id"] == kid and p["candidate_rank"] is not None})
    want = [schedule_id(o) for o in candidates(parse(kernels[kid][0]), row.to_card())]
    assert [sid for _, sid in ranked] == want


def test_a_card_the_store_does_not_describe_gets_measured_pools_only_and_is_counted(tmp_path: Path) -> None:
    from emmy_core.store import CardRow, MeasurementRow

    with open_store(tmp_path / "u.db", "w") as s:
        s.record([MeasurementRow.ok(kernel_id(NORM), "B=8", {"block": 64, "num_warps": 4}, "Mystery GPU", "deploy",
                                    5.0)], kernels=[NORM], cards=[CardRow("Mystery GPU", "cuda", {})])
    manifest = export_db(tmp_path / "u.db", tmp_path / "out")
    assert manifest["tables"]["pools"]["candidates"]["unknown_card"] == 1
    assert [p["measured"] for p in read_pools(tmp_path / "out").to_pylist()] == [True]


def test_export_imports_no_torch(db: Path, tmp_path: Path) -> None:
    script = ("import sys\nfrom emmy_core.exchange.export import export_db\n"
              f"export_db({str(db)!r}, {str(tmp_path / 'x')!r})\n"
              "assert 'torch' not in sys.modules, 'export imported torch'\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_card_row_to_card_inverts_from_card_for_every_table_card() -> None:
    from emmy_core.store import CardRow
    from emmy_core.targets import load_table

    for card in load_table().values():
        row = CardRow.from_card(card)
        back = row.to_card()
        assert CardRow.from_card(back) == row, card.name
        assert back.numeric() == card.numeric(), card.name
        assert (back.vendor, back.cc, back.tensor_cores) == (card.vendor, card.cc, card.tensor_cores), card.name
    cpu = CardRow("AMD EPYC AVX-512 x2", "cpu", {"cores": 2, "simd_bits": 512, "l1d_kb": 32.0}, "x86_64")
    assert CardRow.from_card(cpu.to_card()) == cpu
    assert not CardRow("Mystery GPU", "cuda", {}).described and cpu.described
