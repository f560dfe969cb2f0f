"""Test configuration. Triton's interpreter must be chosen before any kernel is defined."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `import emmy_core` asks: threads sleep, not spin, on 2 shared cores

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

PEER_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "peer"


def _peer_dir() -> Path:
    if not PEER_DIR.is_dir() or not any(PEER_DIR.glob("*.json*")):
        pytest.skip(f"peer data not found at ../shared/peer (looked in {PEER_DIR.name}); skipping")
    return PEER_DIR


@pytest.fixture
def peer_dir() -> Path:
    """The folder of real Kernel Tuner caches beside the project; skips when absent."""
    return _peer_dir()


@dataclass(frozen=True)
class PeerStore:
    """Every peer file imported into one fresh DuckDB store (`db`) and that store exported (`export`), with
    what the import said of each file. Tests read them and never write to them."""

    files: list[Path]
    db: Path
    export: Path
    outcomes: list  # the import's SourceOutcome per file (without the writer's summary)


@pytest.fixture(scope="session")
def peer_store(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> PeerStore:
    """The peer files imported and exported once per test run, whichever xdist worker asks first (the import
    takes about 20 s; the store, the import and the measured view read the very same result): built under a
    file lock in the run's shared temporary folder, the others wait for it and read it."""
    from filelock import FileLock

    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import SourceOutcome, import_db

    peer = _peer_dir()
    files = sorted(p for p in peer.iterdir() if p.name.endswith((".json", ".json.gz")))
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if worker_id != "master" else base) / "peer-store"
    done = root / "outcomes.json"
    with FileLock(f"{root}.lock"):
        if not done.is_file():
            root.mkdir(exist_ok=True)
            outcomes = import_db(root / "peer.db", files, fresh=True)
            if all(o.ok for o in outcomes):
                export_db(root / "peer.db", root / "export")
            written = [{"source": o.source, "kind": o.kind, "ok": o.ok, "message": o.message} for o in outcomes]
            (root / "outcomes.tmp").write_text(json.dumps(written))
            (root / "outcomes.tmp").replace(done)  # written last: the marker that the store is whole
    outcomes = [SourceOutcome(**o) for o in json.loads(done.read_text())]
    return PeerStore(files, root / "peer.db", root / "export", outcomes)


SLOWEST_FIRST = (
    "tests/pipelines/test_chain.py",
    "tests/prior/test_installed.py",
    "tests/pipelines/test_dask_tune.py",
    "tests/store/test_files_peer.py",
    "tests/prior/test_fit.py",
    "tests/prior/test_card_split.py",
    "tests/faults/test_outputs.py",
    "tests/compile/test_equals_torch.py",
    "tests/bench/test_cli.py",
    "tests/compile/test_backend_models.py",
    "tests/prior/test_artifact.py",
    "tests/codegen/test_c_microkernel.py",
    "tests/compile/test_cli.py",
    "tests/faults/test_tracking_timeout.py",
)
"""The test files that took longest in a full run (`pytest --durations`), slowest first. `make test` hands
whole files to its workers in collection order (`--dist loadfile --no-loadscope-reorder`): these start
first, so the run does not end with one worker alone on a long file while the other idles. A schedule
hint only: a file missing here runs in its collection place (`tests/house/test_schedule.py` checks that
each one named exists)."""


def slowest_first(items: list[pytest.Item]) -> None:
    """Reorders `items` in place: the files of SLOWEST_FIRST in its order, then the rest as collected (a
    file's tests keep their order)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    root = Path(__file__).resolve().parents[1]

    def place(item: pytest.Item) -> int:
        try:
            name = item.path.resolve().relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=place)  # stable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slowest_first(items)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch is a hard dependency
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
