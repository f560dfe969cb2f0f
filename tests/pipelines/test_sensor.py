"""The sensor on new tune files: a run when one appears, none when nothing changed, its cursor kept."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from emmy_core.formats.tunefile import tune_file_name
from pipelines.sensors import new_tune_files, read_cursor
from tests.pipelines.conftest import make_resources


def evaluate(root: Path, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor,
                                  resources={"paths": make_resources(root, "sqlite:///unused.db")["paths"]})
    result = new_tune_files(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def test_a_new_tune_file_asks_for_one_run_and_nothing_new_asks_for_none(root: Path,
                                                                         instance: dg.DagsterInstance) -> None:
    first = evaluate(root, instance, None)
    assert not first.run_requests and read_cursor(first.cursor) == set()
    inbox = root / "inbox"
    inbox.mkdir()
    name = tune_file_name("NVIDIA H200", "20261130T120000Z")
    (inbox / name).write_text("{}")  # the sensor looks at names; the fold checks the content
    second = evaluate(root, instance, first.cursor)
    assert len(second.run_requests or []) == 1
    assert second.run_requests[0].job_name in (None, "nightly_refresh")
    assert read_cursor(second.cursor) == {name}
    third = evaluate(root, instance, second.cursor)  # the cursor persisted: the same file is not new
    assert not third.run_requests and third.cursor == second.cursor
    other = tune_file_name("NVIDIA H200", "20261130T130000Z")
    (root / "freezes" / other).write_text("{}")  # beside the freeze counts too
    fourth = evaluate(root, instance, third.cursor)
    assert len(fourth.run_requests or []) == 1
    assert fourth.run_requests[0].run_key != second.run_requests[0].run_key


def test_an_unreadable_cursor_counts_every_waiting_file_as_new() -> None:
    assert read_cursor("not json") == set() and read_cursor('{"a": 1}') == set()
    assert read_cursor('["x.tune-1.json", 3]') == {"x.tune-1.json"}
