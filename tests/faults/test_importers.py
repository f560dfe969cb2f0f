"""Every importer, fed hostile input: no exception but the project's own clear errors (a refusal naming
the file in a bounded message), and nothing written on refusal. A bounded number of examples here;
bench/faults.py runs the same properties longer."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emmy_core.exchange.importer import import_into
from emmy_core.store import open_store
from tests.faults.corpus import JSON_KINDS, check_outcome, hostile_source, import_checked, primed_store, state
from tests.store.test_files_freeze import populate

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_the_corpus_imports_cleanly(corpus: dict[str, Path]) -> None:
    for kind, path in corpus.items():
        store = primed_store()
        assert import_checked(store, path).ok, (kind, path)


@pytest.mark.parametrize("kind", JSON_KINDS)
@FAST
@given(seed=st.integers(0, 2**32 - 1), edits=st.integers(1, 4))
def test_hostile_json_is_refused_clearly_with_nothing_written(corpus: dict[str, Path], tmp_path: Path, kind: str,
                                                              seed: int, edits: int) -> None:
    import_checked(primed_store(), hostile_source(kind, corpus, tmp_path, seed, edits))


@pytest.mark.parametrize("kind", JSON_KINDS)
@FAST
@given(seed=st.integers(0, 2**32 - 1))
def test_hostile_bytes_are_refused_clearly_with_nothing_written(corpus: dict[str, Path], tmp_path: Path, kind: str,
                                                                seed: int) -> None:
    import_checked(primed_store(), hostile_source(kind, corpus, tmp_path, seed, raw=True))


@pytest.mark.parametrize("kind", ["database", "export"])
@SLOW
@given(seed=st.integers(0, 2**32 - 1), edits=st.integers(1, 3))
def test_hostile_tables_are_refused_clearly_with_nothing_written(corpus: dict[str, Path], tmp_path: Path,
                                                                 kind: str, seed: int, edits: int) -> None:
    import_checked(primed_store(), hostile_source(kind, corpus, tmp_path, seed, edits))


@SLOW
@given(kind=st.sampled_from(JSON_KINDS), seed=st.integers(0, 2**32 - 1), edits=st.integers(1, 4))
def test_hostile_sources_into_a_database_write_nothing_on_refusal(corpus: dict[str, Path], tmp_path: Path,
                                                                  kind: str, seed: int, edits: int) -> None:
    """The same through the DuckDB store: a refused batch rolls back whole."""
    db = tmp_path / f"target-{seed}.db"
    with open_store(db, "w") as s:
        populate(s)
    source = hostile_source(kind, corpus, tmp_path, seed, edits)
    with open_store(db, "w") as s:
        before = state(s)
        (outcome,) = import_into(s, [source])
        check_outcome(outcome, source, before, state(s))
