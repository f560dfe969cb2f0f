"""The serving matrix: committed, read strictly, naming file, record and field at fault."""

from __future__ import annotations

import json

import pytest

from emmy_core.graph.models import MODEL_NAMES, build_model
from emmy_core.graph.serving import (
    DEFAULT_PATH,
    ServingMatrixError,
    load_serving_matrix,
    parse_serving_matrix,
)


def _good() -> dict:
    return json.loads(DEFAULT_PATH.read_text())


def test_committed_serving_matrix_covers_the_models_cards_and_settings_of_the_gate() -> None:
    m = load_serving_matrix()
    assert {x.name for x in m.models} == {"llama_block", "mlp"}
    assert m.cards == ("local", "NVIDIA H200", "NVIDIA H100 80GB HBM3")
    assert m.settings == ("deploy", "rank")
    assert all(len(x.shapes) >= 2 for x in m.models)
    assert len(m.cases()) == sum(len(x.shapes) for x in m.models) * 3 * 2
    for x in m.models:  # every listed model is built in the repository
        assert x.name in MODEL_NAMES
        _module, inputs = build_model(x.name)
        assert inputs(dict(x.shapes[0]))[0].shape[:2] == (x.shapes[0][0][1], x.shapes[0][1][1])


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.update(version=2), "field version"),
        (lambda d: d.update(extra=1), "unknown field(s) extra"),
        (lambda d: d["models"][1].update(name="resnet"), "models[1]: field name"),
        (lambda d: d["models"][0].update(dtype="f8"), "models[0]: field dtype"),
        (lambda d: d["models"][0]["shapes"][2].update(B=0), "models[0]: shapes[2]: field B"),
        (lambda d: d["models"][0]["shapes"][1].update(S=True), "models[0]: shapes[1]: field S"),
        (lambda d: d["models"][0]["shapes"][0].update(T=4), "models[0]: shapes[0]: unknown field(s) T"),
        (lambda d: d["models"][0]["shapes"].append(dict(d["models"][0]["shapes"][0])), "listed twice"),
        (lambda d: d["cards"].append("NVIDIA Imaginary"), "cards[3]: unknown card"),
        (lambda d: d["settings"].append("fast"), "settings[2]"),
        (lambda d: d.update(models=[]), "field models: must be a non-empty list"),
    ],
)
def test_serving_matrix_is_loaded_strictly_naming_record_and_field(mutate, where: str) -> None:  # type: ignore[no-untyped-def]
    d = _good()
    mutate(d)
    with pytest.raises(ServingMatrixError) as info:
        parse_serving_matrix(json.dumps(d), "matrix.json")
    assert str(info.value).startswith("matrix.json")
    assert where in str(info.value)


def test_serving_matrix_refuses_duplicate_keys_and_non_json_numbers() -> None:
    text = DEFAULT_PATH.read_text()
    with pytest.raises(ServingMatrixError, match="appears twice"):
        parse_serving_matrix(text.replace('"version": 1,', '"version": 1, "version": 1,'), "m.json")
    with pytest.raises(ServingMatrixError, match="not valid JSON"):
        parse_serving_matrix(text.replace('"B": 1,', '"B": NaN,', 1), "m.json")


def test_missing_serving_matrix_file_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ServingMatrixError, match=r"nope\.json: cannot read"):
        load_serving_matrix(tmp_path / "nope.json")


DEEP = "[" * 100_000 + "]" * 100_000


def test_serving_matrix_nested_too_deeply_is_refused_as_invalid_json_naming_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ServingMatrixError, match=r"^deep\.json: not valid JSON"):
        parse_serving_matrix(DEEP, "deep.json")
    (tmp_path / "deep.json").write_text(DEEP)
    with pytest.raises(ServingMatrixError, match=r"^deep\.json: not valid JSON"):
        load_serving_matrix(tmp_path / "deep.json")


def test_serving_matrix_file_that_is_a_device_or_over_the_cap_is_refused_unread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from emmy_core.graph.serving import MAX_BYTES

    with pytest.raises(ServingMatrixError, match=r"^null: cannot read: is a character device, not a regular file"):
        load_serving_matrix("/dev/null")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_BYTES + 1))
    with pytest.raises(ServingMatrixError, match=rf"^big\.json: cannot read: .*over the cap of {MAX_BYTES}.*unread"):
        load_serving_matrix(big)


@pytest.mark.timeout(30)  # the old reader blocked on the FIFO's open until a writer came
def test_serving_matrix_file_that_is_a_fifo_is_refused_at_once_naming_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os

    fifo = tmp_path / "matrix.json"
    os.mkfifo(fifo)
    with pytest.raises(ServingMatrixError, match=r"^matrix\.json: cannot read: is a FIFO"):
        load_serving_matrix(fifo)
