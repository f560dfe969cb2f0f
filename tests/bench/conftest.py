"""One planted bench shared by the tests that read its outcome (each worker start costs a second)."""

from __future__ import annotations

import pytest

from emmy_core.bench.harness import BenchConfig, BenchReport, Unit, bench
from emmy_core.ir.builders import elementwise
from emmy_core.store import MemoryStore
from emmy_core.targets import Card, resolve_card
from tests.bench import planted
from tests.bench.probes import quiet

PLANTS = (planted.CORRECT, planted.HANG, planted.ABORT, planted.SEGFAULT, planted.WRONG, planted.UNWRITTEN,
          planted.NONDETERMINISTIC, planted.BUILD_ERROR, planted.LAUNCH_ERROR, planted.DECLARED_FREE,
          planted.NOISY)
TIMEOUT_S = 3.0


def tiny_kernel():  # type: ignore[no-untyped-def]
    return elementwise("a+b", dtype="f32", batch_hint=4, cols=16)


@pytest.fixture(scope="session")
def cpu_card() -> Card:
    return resolve_card("local")


@pytest.fixture(scope="session")
def planted_run(cpu_card: Card) -> tuple[BenchReport, MemoryStore]:
    """Every planted behaviour, in one bench of one tiny kernel, recorded into an in-memory store."""
    from emmy_core.exchange.recorders import StoreRecorder

    store = MemoryStore()
    report = bench([(Unit(tiny_kernel(), {"B": 4}), [{"unroll": p} for p in PLANTS])], cpu_card, planted.SPEC,
                   StoreRecorder(store), BenchConfig(setting="rank", timeout_s=TIMEOUT_S, spread_limit=50.0),
                   probe=quiet())
    return report, store
