"""A prepared launch bound over buffers allocated once (`Launch.over`): the pool's pointers are written once,
the per-call ones from the model's values by key; it computes what the launch by names computes."""

from __future__ import annotations

import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.ir.builders import softmax


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("launch_over_cache")))
        yield CBackend().build(softmax(24, dtype="f32"), {"vec": 8, "unroll": 1, "threads": 2}, "deploy")


def test_a_launch_over_a_fixed_output_reads_its_input_from_the_values_given_at_each_call(built) -> None:  # type: ignore[no-untyped-def]
    out = torch.empty(5, 24)
    call = built.prepare({"B": 5}).over({"y": out}, {"x": "scores"})
    for seed in (0, 1):
        x = torch.randn(5, 24, generator=torch.Generator().manual_seed(seed))
        call({"scores": x, "unused": torch.empty(0)})
        want = torch.empty(5, 24)
        built.prepare({"B": 5})({"x": x, "y": want})  # the launch by names
        assert torch.equal(out, want)
        torch.testing.assert_close(out, torch.softmax(x, -1))


def test_a_launch_over_must_name_every_buffer_once(built) -> None:  # type: ignore[no-untyped-def]
    launch = built.prepare({"B": 2})
    with pytest.raises(ValueError, match="names each of x, y once"):
        launch.over({"y": torch.empty(2, 24)}, {})
    with pytest.raises(ValueError, match="names each of x, y once"):
        launch.over({"y": torch.empty(2, 24)}, {"x": "a", "y": "b"})
