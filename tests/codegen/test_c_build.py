"""Rules of building and launching C kernels: a compiler failure is a BuildError (never a crash), the
disk cache is hit the second time (counted compiler runs, not time), the cache folder is read at each
build, concurrent builders never see half a file, and a launch on tensors that do not fit the kernel is
a LaunchError naming the buffer or size at fault.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from emmy_core.codegen.backend import BuildError, LaunchError
from emmy_core.codegen.c import CBackend
from emmy_core.codegen.c_build import CCompiler
from emmy_core.ir.builders import Dim, matmul, rmsnorm

PROG = rmsnorm(48, dtype="f32")
KNOBS = {"vec": 4, "threads": 2}


def _so_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.so"))


def test_a_broken_source_becomes_a_build_error_with_the_compilers_first_lines(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))
    cc = CCompiler()
    with pytest.raises(BuildError, match=r"broken_kernel: the C compiler failed \(exit [1-9]") as err:
        cc.library("int emmy_kernel(void) { return undeclared_name; }\n", ("-O1",), "broken_kernel")
    assert "undeclared_name" in str(err.value) and "error" in str(err.value)
    assert len(str(err.value).splitlines()) <= 21
    assert _so_files(tmp_path) == [] and not list(tmp_path.glob("emmy-cc-*"))  # nothing half-written is left


def test_a_missing_compiler_is_a_build_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))
    with pytest.raises(BuildError, match="not usable"):
        CBackend(cc=str(tmp_path / "no-such-cc")).build(PROG, KNOBS, "rank")


def test_the_cache_is_hit_the_second_time_without_recompiling(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))
    first = CBackend()
    first.build(PROG, KNOBS, "rank")
    assert first.compiles == 1 and len(_so_files(tmp_path)) == 1
    first.build(PROG, KNOBS, "rank")
    assert first.compiles == 1
    second = CBackend()  # a fresh backend (another process, say) finds the build on disk
    built = second.build(PROG, KNOBS, "rank")
    assert second.compiles == 0
    x = torch.randn(3, 48)
    w = torch.randn(48)
    y = torch.empty(3, 48)
    built({"x": x, "w": w, "y": y}, {"B": 3})
    torch.testing.assert_close(y, x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w)
    second.build(PROG, KNOBS, "deploy")  # other flags: another build
    second.build(PROG, {**KNOBS, "vec": 8}, "rank")  # other source: another build
    assert second.compiles == 2 and len(_so_files(tmp_path)) == 3
    assert len(list(tmp_path.glob("*.c"))) == 3  # the source is kept beside its build


def test_the_cache_folder_is_read_at_each_build(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    be = CBackend()
    for name in ("a", "b"):
        monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path / name))
        be.build(PROG, KNOBS, "rank")
        assert len(_so_files(tmp_path / name)) == 1
    assert be.compiles == 2


def test_concurrent_builders_never_see_half_a_file(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))
    prog = matmul(Dim("T", 4), 24, 40, dtype="f32")
    results: list[object] = []

    def build() -> None:
        try:
            built = CBackend().build(prog, {"tile_m": 4, "threads": 1}, "rank")
            a, b, y = torch.randn(5, 40), torch.randn(40, 24), torch.empty(5, 24)
            built({"a": a, "b": b, "y": y}, {"T": 5})
            torch.testing.assert_close(y, a @ b, rtol=1e-4, atol=1e-4)
            results.append("ok")
        except Exception as exc:  # reported below, with the thread's error
            results.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["ok"] * 3
    assert len(_so_files(tmp_path)) == 1 and not list(tmp_path.glob("emmy-cc-*"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_launch_cache")))
        yield CBackend().build(PROG, KNOBS, "rank")


def _args() -> dict[str, torch.Tensor]:
    return {"x": torch.randn(4, 48), "w": torch.randn(48), "y": torch.empty(4, 48)}


@pytest.mark.parametrize("change, sizes, fragment", [
    (lambda a: a.pop("w"), {"B": 4}, "missing in buffer 'w'"),
    (lambda a: a.update(extra=torch.zeros(1)), {"B": 4}, "extra are not buffers"),
    (lambda a: a.update(x=torch.randn(4, 48, dtype=torch.float64)), {"B": 4}, "'x' has dtype torch.float64"),
    (lambda a: a.update(x=torch.randn(4, 47)), {"B": 4}, r"'x' has shape \(4, 47\), expected \(4, 48\)"),
    (lambda a: a.update(x=torch.randn(48, 4).t()), {"B": 4}, "'x' is not contiguous"),
    (lambda a: a.update(x=torch.randn(4, 96)[:, ::2]), {"B": 4}, "'x' is not contiguous"),
    (lambda a: a.update(w=[0.0] * 48), {"B": 4}, "'w' must be a torch tensor"),
    (lambda a: a.update(y=a["x"]), {"B": 4}, "out buffer 'y' overlaps buffer 'x'"),
    (lambda a: None, {}, "no size given for dynamic axis 'B'"),
    (lambda a: None, {"B": 4, "H": 48}, "not dynamic axes: H"),
    (lambda a: None, {"B": 0}, "size of 'B' must be an integer"),
    (lambda a: None, {"B": 4.0}, "size of 'B' must be an integer"),
])
def test_a_launch_on_tensors_that_do_not_fit_is_a_launch_error(built, change, sizes, fragment: str) -> None:  # type: ignore[no-untyped-def]
    args = _args()
    change(args)
    with pytest.raises(LaunchError, match=fragment):
        built(args, sizes)


def test_a_launch_writes_the_outputs_in_place(built) -> None:  # type: ignore[no-untyped-def]
    args = _args()
    y = args["y"]
    built(args, {"B": 4})
    x, w = args["x"], args["w"]
    assert args["y"] is y
    torch.testing.assert_close(y, x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w)
