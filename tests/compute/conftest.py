"""Fixtures of the scale-out tests: a toy export (three cards, three kernels of 12 measured tiles) and a
`LocalCluster` of two worker processes (what `local:2` starts), each made once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

CARDS = ("NVIDIA H100 PCIe", "NVIDIA L4", "NVIDIA GeForce RTX 4090")


@pytest.fixture(scope="session")
def toy_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three cards x three kernels of 12 tiles, times a known function of card, kernel and tile."""
    import json

    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import import_db
    from tests.eval.conftest import cache_doc

    tmp = tmp_path_factory.mktemp("toy")
    files = []
    for c, card in enumerate(CARDS):
        for k in range(3):
            entries = [(t, 1.0 + ((t * (c + 2) + 3 * k) % 7) * 0.1) for t in range(1, 13)]
            f = tmp / f"c{c}k{k}.json"
            f.write_text(json.dumps(cache_doc(f"toy{k}", entries, card, problem=1024 * (k + 1))))
            files.append(f)
    outcomes = import_db(tmp / "toy.db", files, fresh=True)
    assert all(o.ok for o in outcomes), [o.message for o in outcomes]
    export_db(tmp / "toy.db", tmp / "export")
    return tmp / "export"


@pytest.fixture(scope="session")
def cluster() -> Any:
    """Two worker processes, one thread each (what `local:2` starts), kept for the session."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c

