"""The fault suite's shared corpus: one valid source of every kind, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.corpus import build_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_corpus(tmp_path_factory.mktemp("corpus"))
