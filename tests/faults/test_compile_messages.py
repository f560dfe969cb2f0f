"""The compile path refuses a careless or hostile caller with one clear message (no traceback of torch's,
no misleading diagnosis), and says so when it drops something the caller may want (gradients)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import emmy_core
from emmy_core.cli.main import app
from emmy_core.compiler import NoGradientsWarning
from emmy_core.graph.errors import GraphError, UnsupportedOp
from emmy_core.graph.user_models import load_model
from emmy_core.ir import IRError, parse_sizes

runner = CliRunner()
X = torch.randn(4, 8)


class Lin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class ScalesByTheBatch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * x.shape[0]


class ReshapesByArithmetic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        return self.lin(x).reshape(b * 2, 4)


@pytest.fixture(scope="module")
def compiled() -> emmy_core.Compiled:
    return emmy_core.explain(Lin(), (X,), prior=False, library=False)


def test_a_user_model_that_raises_in_init_is_named_with_its_error() -> None:
    res = runner.invoke(app, ["explain", "--model", "tests.faults.user_models_for_faults:RaisesInInit",
                              "--input", "B,8", "--shape", "B=2,S=1"])
    assert isinstance(res.exception, SystemExit) and res.exit_code != 0
    assert "RaisesInInit: its __init__ raised RuntimeError: weights file missing" in res.output
    assert "Traceback" not in res.output


def test_a_user_model_that_needs_arguments_says_it_is_built_with_none() -> None:
    res = runner.invoke(app, ["explain", "--model", "tests.faults.user_models_for_faults:NeedsArguments",
                              "--input", "B,8", "--shape", "B=2,S=1"])
    assert isinstance(res.exception, SystemExit) and res.exit_code != 0
    assert "NeedsArguments: cannot be built with no arguments" in res.output and "hidden" in res.output


USER_MODELS = """
import sys
import torch
from torch import nn


class Lin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class RefusesTo(Lin):
    def to(self, *args, **kwargs):
        raise RuntimeError("cannot move")


class TypeErrorInside(Lin):
    def __init__(self) -> None:
        super().__init__()
        int([])


class ExitsInInit(Lin):
    def __init__(self) -> None:
        super().__init__()
        sys.exit(7)
"""


def _user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, **modules: str) -> None:
    """A package `package` under `tmp_path` holding `modules` (name -> source), importable for this test."""
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    for name, text in modules.items():
        (tmp_path / package / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_user_module_whose_body_raises_or_does_not_parse_is_refused_naming_module_and_exception(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_package(tmp_path, monkeypatch, "emmy_fault_body", divides="x = 1 / 0\n", broken="def f(:\n",
                  exits="import sys\nsys.exit(3)\n")
    with pytest.raises(GraphError, match=r"^cannot load emmy_fault_body\.divides:M: importing emmy_fault_body\."
                                         r"divides raised ZeroDivisionError: division by zero$"):
        load_model("emmy_fault_body.divides:M", inputs=["B,8"])
    with pytest.raises(GraphError, match=r"^cannot load emmy_fault_body\.broken:M: importing emmy_fault_body\."
                                         r"broken raised SyntaxError: "):
        load_model("emmy_fault_body.broken:M", inputs=["B,8"])
    with pytest.raises(GraphError, match=r"importing emmy_fault_body\.exits called sys\.exit\(3\)$"):
        load_model("emmy_fault_body.exits:M", inputs=["B,8"])


def test_a_user_model_whose_to_raises_is_refused_naming_the_class_and_the_exception(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_package(tmp_path, monkeypatch, "emmy_fault_to", models=USER_MODELS)
    with pytest.raises(GraphError, match=r"^emmy_fault_to\.models:RefusesTo: its \.to\(torch\.float16\)\.eval\(\) "
                                         r"raised RuntimeError: cannot move$"):
        load_model("emmy_fault_to.models:RefusesTo", inputs=["B,8"])
    module, inputs = load_model("emmy_fault_to.models:Lin", inputs=["B,8"])
    assert module.lin.weight.dtype == torch.float16 and inputs({"B": 2, "S": 1})[0].shape == (2, 8)


def test_a_type_error_raised_inside_init_is_named_as_raised_there_not_as_missing_arguments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_package(tmp_path, monkeypatch, "emmy_fault_init", models=USER_MODELS)
    with pytest.raises(GraphError, match=r"^emmy_fault_init\.models:TypeErrorInside: its __init__ raised TypeError: "
                                         r"int\(\) argument") as info:
        load_model("emmy_fault_init.models:TypeErrorInside", inputs=["B,8"])
    assert "no arguments" not in str(info.value)


def test_a_user_model_calling_sys_exit_in_init_is_refused_naming_it_instead_of_exiting_with_its_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_package(tmp_path, monkeypatch, "emmy_fault_exit", models=USER_MODELS)
    with pytest.raises(GraphError, match=r"^emmy_fault_exit\.models:ExitsInInit: its __init__ called sys\.exit\(7\)$"):
        load_model("emmy_fault_exit.models:ExitsInInit", inputs=["B,8"])
    res = runner.invoke(app, ["explain", "--model", "emmy_fault_exit.models:ExitsInInit", "--input", "B,8",
                              "--shape", "B=2,S=1", "--no-prior"])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == "emmy: error: emmy_fault_exit.models:ExitsInInit: its __init__ called sys.exit(7)"


def test_a_user_package_not_on_the_import_path_is_refused_with_a_hint_to_use_pythonpath_or_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GraphError, match=r"^cannot load emmy_fault_absent\.models:Block: No module named "
                                         r"'emmy_fault_absent' \(.*PYTHONPATH=\. or install it\)$"):
        load_model("emmy_fault_absent.models:Block", inputs=["B,8"])
    # a missing module inside a package that is found, or a dependency the module imports: no such hint
    _user_package(tmp_path, monkeypatch, "emmy_fault_found", needs="import emmy_fault_dependency\n")
    for spec, missing in (("emmy_fault_found.absent:Block", "emmy_fault_found.absent"),
                          ("emmy_fault_found.needs:Block", "emmy_fault_dependency")):
        with pytest.raises(GraphError, match=rf"No module named '{missing}'$"):
            load_model(spec, inputs=["B,8"])


@pytest.mark.parametrize("model", [ScalesByTheBatch, ReshapesByArithmetic])
def test_arithmetic_on_a_shape_read_is_refused_naming_the_axis_and_the_line(model: type[nn.Module]) -> None:
    with pytest.raises(UnsupportedOp, match=r"computes with the dynamic axis B read from a shape.*at .*"
                                            r"test_compile_messages\.py:\d+"):
        emmy_core.explain(model(), (X,), prior=False, library=False)


def test_compile_given_a_plain_function_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"compile takes a torch\.nn\.Module, got function"):
        emmy_core.compile(lambda x: x + 1, (X,), prior=False, library=False)  # type: ignore[arg-type]


def test_a_prior_of_the_wrong_kind_is_a_type_error_naming_what_it_takes() -> None:
    with pytest.raises(TypeError, match=r"prior= must be None .* got dict"):
        emmy_core.compile(Lin(), (X,), prior={"a": 1})


def test_strict_evidence_must_be_a_bool_not_a_truthy_string() -> None:
    with pytest.raises(TypeError, match="strict_evidence= must be True or False, got str 'no'"):
        emmy_core.compile(Lin(), (X,), prior=False, library=False, strict_evidence="no")  # type: ignore[arg-type]


def test_a_meta_tensor_input_is_refused_as_meta_not_blamed_on_dynamic_axes() -> None:
    with pytest.raises(GraphError, match="meta tensors are not supported") as info:
        emmy_core.explain(Lin(), (torch.randn(4, 8, device="meta"),), prior=False, library=False)
    assert "dynamic ax" not in str(info.value)


def test_a_model_that_fails_to_run_shows_only_its_own_error(capfd: pytest.CaptureFixture[str]) -> None:
    class Mismatch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    with pytest.raises(GraphError, match=r"at .*test_compile_messages\.py:\d+: return self\.lin\(x\): "
                                         r"RuntimeError: mat1 and mat2 shapes cannot be multiplied") as info:
        emmy_core.explain(Mismatch(), (X,), prior=False, library=False)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "ShapeProp" not in out + err + str(info.value)


def test_a_negative_shape_says_sizes_must_be_positive() -> None:
    with pytest.raises(IRError, match="sizes must be positive"):
        parse_sizes("B=-1")
    res = runner.invoke(app, ["explain", "--model", "mlp", "--shape", "B=-1,S=8"])
    assert res.exit_code != 0 and "sizes must be positive" in res.output and "NAME=INT" not in res.output


@pytest.mark.parametrize("sizes", [{"B": -3}, {"B": 0}, {"B": 1.5}, {"B": True}, {"B": "8"}, {"B": 2**40}])
def test_layout_refuses_a_size_that_is_not_a_positive_whole_number(compiled: emmy_core.Compiled,
                                                                    sizes: dict) -> None:
    with pytest.raises(GraphError, match=r"size of B must be a whole number in 1\.\."):
        compiled.layout(sizes)
    with pytest.raises(GraphError, match="size of B must be a whole number"):
        compiled.resolve(sizes)


def test_a_call_that_torch_tracks_gradients_for_runs_as_torch_and_warns_once_that_emmy_computes_none() -> None:
    model = Lin()
    compiled = emmy_core.compile(model, (X,), prior=False, library=False, torch_ops="refuse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(X.requires_grad_(False))
        compiled(X)
    mine = [w for w in caught if issubclass(w.category, NoGradientsWarning)]
    assert len(mine) == 1 and "Emmy computes no gradients" in str(mine[0].message)
    assert "torch ran it" in str(mine[0].message)
    assert out.requires_grad and compiled.torch_calls == 2  # torch's answer, with its gradients
    quiet = emmy_core.compile(Lin(), (X,), prior=False, library=False, torch_ops="refuse")
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        quiet(X)
    assert not [w for w in caught if issubclass(w.category, NoGradientsWarning)] and quiet.torch_calls == 0


def test_a_model_whose_forward_raises_or_calls_sys_exit_is_refused_naming_the_model_and_what_forward_did() -> None:
    class RaisesInForward(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    class ExitsInForward(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise SystemExit(7)

    with pytest.raises(GraphError, match=r"^RaisesInForward: forward raised ValueError: boom$"):
        emmy_core.explain(RaisesInForward(), (X,), prior=False, library=False)
    with pytest.raises(GraphError, match=r"^ExitsInForward: forward called sys\.exit\(7\)$"):
        emmy_core.explain(ExitsInForward(), (X,), prior=False, library=False)
