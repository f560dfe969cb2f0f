"""The serving matrix: committed, read strictly, naming file, record and field at fault."""

from __future__ import annotations

import json

import pytest

from emmy_core.graph.models import MODEL_NAMES, build_model, model_sizes
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
    assert {x.name for x in m.models} == {"llama_block", "mlp", "decoder_896", "decoder_2048", "decoder_4096"}
    assert m.cards == ("local", "NVIDIA H200", "NVIDIA H100 80GB HBM3")
    assert m.settings == ("deploy", "rank")
    assert all(len(x.shapes) >= 2 for x in m.models)
    assert len(m.cases()) == sum(len(x.shapes) for x in m.models) * 3 * 2
    for x in m.models:  # every listed model is built in the repository
        assert x.name in MODEL_NAMES
    _module, inputs = build_model("llama_block")
    assert inputs({"B": 2, "S": 3})[0].shape == (2, 3, 256)


def test_serving_matrix_holds_real_decoder_sizes_in_f32_and_bf16() -> None:
    """Issue 44: hidden 896-4096 with an MLP 2.5-3.5x the hidden size, at B=1 with S = 1, 16 and 128 and at
    B=8 with S=128, in f32 and bf16, so the freeze and the prior see products as large as a deployed model's."""
    m = load_serving_matrix()
    want = {(("B", 1), ("S", 1)), (("B", 1), ("S", 16)), (("B", 1), ("S", 128)), (("B", 8), ("S", 128))}
    served: dict[str, set[str]] = {}
    for x in m.models:
        if x.name.startswith("decoder_"):
            assert want <= set(x.shapes), x.name
            served.setdefault(x.name, set()).add(x.dtype)
    assert served and all(d == {"f32", "bf16"} for d in served.values())
    hidden = {model_sizes(name)[0] for name in served}
    assert min(hidden) == 896 and max(hidden) == 4096
    for name in served:
        h, ffn = model_sizes(name)
        assert 2.5 <= ffn / h <= 3.5, name


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
        (lambda d: d["models"].append(dict(d["models"][0])), "models[8]: field name: model 'llama_block' listed twice"),
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


def test_the_real_decoders_lower_to_products_of_their_own_sizes() -> None:
    """The smallest real decoder lowers whole (no op left to torch), its products at its hidden and MLP widths."""
    import torch

    from emmy_core.graph.pipeline import compile_model

    lowered = compile_model("decoder_896", {"B": 1, "S": 16}, torch.float32)
    names = {k.program.name for k in lowered.kernels}
    assert any("N2816_K896" in n for n in names) and any("N896_K2816" in n for n in names), names
    assert any("N896_K896" in n for n in names), names
