"""A Kernel Tuner cache's card must be one Emmy can keep apart from every other (issue 45, "Smaller"):

- this machine's CPU card is refused (a cache measures a GPU; its card row would describe the CPU as one);
- a name whose freeze file name clashes with a card already in the store is refused (`db freeze` would then
  refuse the whole store);
- a leading and a trailing space are refused alike.

Each refusal names the file and `$.device_name`, and nothing of the cache is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy_core.exchange.importer import import_into
from emmy_core.formats.localcard import local_cpu
from emmy_core.store import MemoryStore, open_store
from tests.faults.corpus import kt_cache


def cache_file(folder: Path, device_name: str) -> Path:
    path = folder / "cache.json"
    path.write_text(json.dumps({**kt_cache(), "device_name": device_name}))
    return path


def refused(store: object, path: Path, words: str) -> None:
    before = store.counts() if hasattr(store, "counts") else None  # type: ignore[attr-defined]
    (outcome,) = import_into(store, [path])  # type: ignore[arg-type]
    assert not outcome.ok, outcome.message
    assert str(path) in outcome.message and "device_name" in outcome.message and words in outcome.message, \
        outcome.message
    if before is not None:
        assert store.counts() == before  # type: ignore[attr-defined]


def test_a_cache_naming_this_machines_cpu_card_is_refused(tmp_path: Path) -> None:
    here = local_cpu()
    if here is None:
        pytest.skip("this machine's CPU cannot be probed")
    refused(MemoryStore("t"), cache_file(tmp_path, here.name), "this machine's CPU card")


def test_a_cache_whose_freeze_file_name_clashes_with_a_stored_card_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with open_store(db, "w") as store:
        (ok,) = import_into(store, [cache_file(tmp_path, "NVIDIA GeForce RTX 3090")])
        assert ok.ok, ok.message
        refused(store, cache_file(tmp_path, "NVIDIA GeForce RTX-3090"), "nvidia-geforce-rtx-3090.json")
        (again,) = import_into(store, [cache_file(tmp_path, "NVIDIA GeForce RTX 3090")])  # the same card: fine
        assert again.ok, again.message


@pytest.mark.parametrize("name", [" NVIDIA A100", "NVIDIA A100 "])
def test_a_leading_or_trailing_space_is_refused_alike(tmp_path: Path, name: str) -> None:
    refused(MemoryStore("t"), cache_file(tmp_path, name), "begins or ends with a space")
