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


def test_a_launch_over_at_other_sizes_computes_there_over_the_front_of_its_buffers(built) -> None:  # type: ignore[no-untyped-def]
    """`at(sizes)`: the same pointers at other sizes of the dynamic axes (a runner serving a size bucket holds
    buffers for its largest sizes): the rows beyond the new size are left as they were; the first call's sizes
    are its own still."""
    room = torch.full((8, 24), 7.0)
    first = built.prepare({"B": 8}).over({"y": room}, {"x": "x"})
    three = first.at([3])
    x = torch.randn(8, 24, generator=torch.Generator().manual_seed(0))
    three({"x": x})
    torch.testing.assert_close(room[:3], torch.softmax(x[:3], -1))
    assert torch.equal(room[3:], torch.full((5, 24), 7.0))
    first({"x": x})
    torch.testing.assert_close(room, torch.softmax(x, -1))


def test_a_launch_at_other_sizes_refuses_a_wrong_count_or_value(built) -> None:  # type: ignore[no-untyped-def]
    from emmy_core.codegen.backend import LaunchError

    call = built.prepare({"B": 2}).over({"y": torch.empty(2, 24)}, {"x": "x"})
    for bad in ([], [1, 2], [0], [True], [2.0]):
        with pytest.raises(LaunchError, match=r"sizes given|a size must be"):
            call.at(bad)  # type: ignore[arg-type]
