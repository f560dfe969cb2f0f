"""A model named on a command line: a reference model by name, or a user's own as `package.module:Class`.

A user's class is imported and built with no arguments (`eval()` mode, the requested dtype);
its inputs are described by `--input` specs, one per input, each a comma-separated shape of
`B`, `S` and static sizes (`B,S,256`). Reference models bring their own inputs. The result is
a module and a function of a {B, S} shape giving input tensors, as `models.build_model` gives.

The user's code runs here (the module's body, `__init__`, `.to()`): whatever it raises, `sys.exit`
included, is a `GraphError` naming the model and the exception, never a traceback or a silent exit.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from emmy_core.graph.errors import GraphError
from emmy_core.graph.models import MODEL_NAMES, InputsFn, build_model
from emmy_core.graph.ops import DYNAMIC_AXES

_PATH = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)\Z")
MAX_STATIC = 1 << 20


def parse_input_spec(text: str) -> tuple[int | str, ...]:
    """`B,S,256` -> ("B", "S", 256); refuses anything but B, S and positive sizes."""
    dims: list[int | str] = []
    for item in text.split(","):
        item = item.strip()
        if item in DYNAMIC_AXES:
            if item in dims:
                raise GraphError(f"input spec {text[:60]!r}: {item} appears twice")
            dims.append(item)
        elif item.isascii() and item.isdigit() and 1 <= int(item) <= MAX_STATIC:  # not `１２８` or `²`
            dims.append(int(item))
        else:
            raise GraphError(f"input spec {text[:60]!r}: {item[:20]!r} is not B, S or a size in 1..{MAX_STATIC}")
    if not dims:
        raise GraphError("an input spec needs at least one dimension")
    return tuple(dims)


def load_model(spec: str, dtype: torch.dtype = torch.float16, inputs: Sequence[str] = ()) -> tuple[nn.Module, InputsFn]:
    """The module named by `spec` and a function of a shape giving its inputs."""
    if spec in MODEL_NAMES:
        if inputs:
            raise GraphError(f"{spec} is a reference model: it brings its own inputs (no --input)")
        return build_model(spec, dtype)
    m = _PATH.match(spec)
    if m is None:
        raise GraphError(f"unknown model {spec[:80]!r}: give a reference model ({', '.join(MODEL_NAMES)}) or "
                         "package.module:Class")
    if not inputs:
        raise GraphError(f"{spec}: give one --input per model input, e.g. --input B,S,256")
    cls = _import_class(spec, m.group(1), m.group(2))
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise GraphError(f"{spec} is not an nn.Module class")
    try:
        inspect.signature(cls).bind()
    except TypeError as exc:  # the call itself needs arguments (a TypeError inside __init__ is the user's own)
        raise GraphError(f"{spec}: cannot be built with no arguments ({exc}); give it defaults for every "
                         "argument, or a subclass that has them") from None
    except ValueError:  # no signature to read: calling it says
        pass
    try:
        module = cls()
    except (Exception, SystemExit) as exc:  # the user's own __init__: whatever it raised is named, not traced back
        raise GraphError(f"{spec}: its __init__ {_raised(exc)}") from None
    try:
        module = module.to(dtype).eval()
    except (Exception, SystemExit) as exc:
        raise GraphError(f"{spec}: its .to({dtype}).eval() {_raised(exc)}") from None
    shapes = [parse_input_spec(s) for s in inputs]

    def example_inputs(shape: Mapping[str, int]) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(0)
        return tuple(torch.randn([d if isinstance(d, int) else shape[d] for d in dims], generator=gen).to(dtype)
                     for dims in shapes)

    return module, example_inputs


def _import_class(spec: str, module_name: str, attr: str) -> object:
    """`attr` of the module `module_name`, importing it; GraphError naming `spec` and what went wrong."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        hint = (f" ({top} is not on the import path: run from the folder holding it with PYTHONPATH=. or install "
                "it)") if exc.name == top else ""
        raise GraphError(f"cannot load {spec}: {exc}{hint}") from None
    except ImportError as exc:
        raise GraphError(f"cannot load {spec}: {exc}") from None
    except (Exception, SystemExit) as exc:  # the module's own body (a SyntaxError too): named, not traced back
        raise GraphError(f"cannot load {spec}: importing {module_name} {_raised(exc)}") from None
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise GraphError(f"cannot load {spec}: {exc}") from None
    except (Exception, SystemExit) as exc:  # a module-level __getattr__ of the user's
        raise GraphError(f"cannot load {spec}: reading {attr} {_raised(exc)}") from None


def _raised(exc: BaseException) -> str:
    """What the user's code did, for a message: `raised ValueError: text` or `called sys.exit(7)`."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({repr(exc.code)[:60]})"
    text = str(exc).strip().splitlines()
    return f"raised {type(exc).__name__}: {text[0][:300]}" if text else f"raised {type(exc).__name__}"
