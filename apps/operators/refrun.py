"""The reference runner: a child process that executes operator reference code.

Reference code is code from outside (imported benchmarks), so it runs only here, never in the
web or worker process: `python -m apps.operators.refrun` reads one JSON request on stdin and
writes one JSON answer on stdout. It imports nothing of Django.

`python -m apps.operators.refrun --warm` is the same runner kept warm (apps/operators/
warmrunner.py): PyTorch is imported once, and each order on stdin (a request, its limits and
its files) is served by a child forked for it, in a session of its own, under the limits; the
runner answers each order with one line, how the child ended.

Request: {"kind": "kope"|"kernelbench"|"npukernelbench", "source": {...}, "cases": [...],
          "seed": int, "kernel_so": path|null, "attributes": [[float]], "max_abs", "max_rel"}
Answer:  {"cases": [{"case_id", "outputs": [{"shape", "dtype"}], "error", "check": {...},
                     "settings": [...] where the Model is built with a case's settings}]}
With "mode": "lower", the answer is the Model lowered to a naive C kernel for the cases
(apps/operators/lowering; a case's "attributes", the kernel's first attributes, tell its
trace apart): {"source": str, "left_out": [str]} or {"error": str}.
A request {"batch": [request, ...]} is answered {"batch": [answer, ...]}.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import ctypes
import functools
import hashlib
import json
import math
import os
import select
import signal
import sys
import traceback
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import numpy
import torch

from apps.operators.scaling import scaled_size
from apps.sandbox import policies, seccomp
from apps.sandbox.jail import Limits, sandbox_ids
from apps.sandbox.policies import Step

KOPE_DTYPES = {torch.float32: 0, torch.float64: 1, torch.int32: 2, torch.int64: 3,
               torch.uint8: 4, torch.bool: 5}  # fmt: skip


class Reference:
    """One loaded reference: makes inputs for a case and computes the expected outputs; where
    it is a Model, builds that model for a case (what the lowering traces)."""

    def __init__(
        self,
        make_inputs: Callable[..., list[Any]],
        compute: Callable[..., list[Any]],
        check: Callable[..., Any] | None = None,
        model: Callable[[dict[str, Any]], torch.nn.Module] | None = None,
        settings: Callable[[dict[str, Any]], list[Any]] | None = None,
    ) -> None:
        self.make_inputs = make_inputs
        self.compute = compute
        self.check = check
        self.model = model
        self.settings = settings  # what the model is built with for a case (its init inputs)


# --- inputs and outputs as a kernel sees them: flat ------------------------------------------

_LEAF = object()  # where a tensor or number was, in a structure flattened() made


def flattened(value: Any, leaves: list[Any]) -> Any:
    """`value`'s structure, each tensor and number in it moved to `leaves` (in order) and a
    placeholder left in its place; text, None and other constants stay where they are."""
    if isinstance(value, list | tuple):
        return type(value)(flattened(item, leaves) for item in value)
    if isinstance(value, torch.Tensor | bool | int | float):
        leaves.append(value)
        return _LEAF
    return value


def rebuilt(structure: Any, leaves: Iterator[Any]) -> Any:
    if isinstance(structure, list | tuple):
        return type(structure)(rebuilt(item, leaves) for item in structure)
    return next(leaves) if structure is _LEAF else structure


class FlatInputs(torch.nn.Module):
    """A model called with flat inputs and giving flat outputs, as a kernel is: what the
    lowering traces."""

    def __init__(self, model: torch.nn.Module, structure: Any) -> None:
        super().__init__()
        self.model, self.structure = model, structure

    def forward(self, *inputs: Any) -> tuple[Any, ...]:
        leaves: list[Any] = []
        flattened(as_list(self.model(*rebuilt(self.structure, iter(inputs)))), leaves)
        return tuple(leaves)


def case_key(params: Any) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def with_flat_inputs(reference: Reference) -> Reference:
    """The reference with its inputs and outputs as flat lists of tensors and numbers, the
    kernel's view: a problem whose forward takes lists of tensors (NPUKernelBench's Foreach
    operators) or constants (a mode's name) gets them back as it made them. A case's structure
    depends on its params only, so it is kept per params from the last make_inputs."""
    structures: dict[str, Any] = {}

    def make_inputs(params: dict[str, Any], generator: torch.Generator) -> list[Any]:
        leaves: list[Any] = []
        made = list(reference.make_inputs(params, generator))
        structures[case_key(params)] = flattened(made, leaves)
        return leaves

    def structure_for(params: dict[str, Any]) -> Any:
        key = case_key(params)  # once: compute is on PyTorch eager's timed path
        if key not in structures:
            make_inputs(params, torch.Generator().manual_seed(0))
        return structures[key]

    def compute(inputs: list[Any], params: dict[str, Any]) -> list[Any]:
        leaves: list[Any] = []
        flattened(reference.compute(rebuilt(structure_for(params), iter(inputs)), params), leaves)
        return leaves

    def model(params: dict[str, Any]) -> torch.nn.Module:
        assert reference.model is not None
        return FlatInputs(reference.model(params), structure_for(params))

    return Reference(make_inputs, compute, reference.check,
                     model=model if reference.model is not None else None,
                     settings=reference.settings)  # fmt: skip


# --- loading the three layouts -------------------------------------------------------------


def _stub_module(name: str) -> types.ModuleType:
    """Stands in for modules that only exist on other hosts (torch_npu, generated kernels)."""
    module = types.ModuleType(name)

    def missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _stub_module(f"{name}.{attr}")

    module.__getattr__ = missing  # type: ignore[method-assign]
    return module


def _tolerant_import(
    name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0
) -> Any:
    """A module missing here stands in as a stub, when the problem's own code imports it: a
    package it uses may probe an optional one (scipy tries `import cython`) and must see the
    ImportError."""
    try:
        return _real_import(name, globals_, locals_, fromlist, level)
    except ImportError:
        if (globals_ or {}).get("__name__") not in _problem_modules:
            raise
        stub = _stub_module(name)
        sys.modules[name] = stub
        return stub


_real_import = builtins.__import__
_problem_modules: set[str] = set()  # the names exec_module ran a problem's code under


def exec_module(name: str, source: str, *, tolerant: bool = False) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = builtins
    _problem_modules.add(name)
    if tolerant:
        builtins.__import__ = _tolerant_import  # type: ignore[assignment]
    try:
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # noqa: S102 (sandboxed child)
    finally:
        builtins.__import__ = _real_import
    sys.modules[name] = module
    return module


def load_kope(source: dict[str, str]) -> Reference:
    module = exec_module("reference", source["reference"])
    return Reference(module.make_inputs, module.reference, getattr(module, "check", None))


def scale_size_constants(module: types.ModuleType, scale: float) -> None:
    """Sizes a case's params do not give (ints computed from others) scale as they did."""
    for name, value in list(vars(module).items()):
        if type(value) is int and not name.startswith("_"):
            setattr(module, name, scaled_size(value, scale))


def use_case_sizes(module: types.ModuleType, params: dict[str, Any], derived: Any) -> None:
    """The problem's module constants as the case gives them: the case's params are its sizes,
    so two cases of one problem can have different ones. Then the assignments computed from
    them run again (`derived`), so `bias_shape = (out_channels, 1, 1)` follows."""
    for name, value in params.items():
        current = getattr(module, name, None)
        if type(current) is int and type(value) is int:
            setattr(module, name, value)
        elif isinstance(current, tuple | list) and isinstance(value, list):
            setattr(module, name, type(current)(value))
    if derived is not None:
        exec(derived, module.__dict__)  # noqa: S102 (sandboxed child)


def derived_assignments(source: str) -> Any:
    """The problem's module-level assignments computed from its literal sizes (the importer's
    params), directly or through another such assignment, compiled to run again once the
    sizes are a case's; None when there are none. One computed from numbers alone
    (`M = 256 * 8`) was scaled with the rest and is not run again."""
    sizes: set[str] = set()
    statements: list[ast.stmt] = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        targets = assigned_names(node)
        if is_literal_size(node.value):
            sizes |= targets
        elif read_names(node.value) & sizes:
            statements.append(node)
            sizes |= targets
    if not statements:
        return None
    return compile(ast.Module(body=statements, type_ignores=[]), "<problem>", "exec")


def assigned_names(node: ast.Assign | ast.AnnAssign) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}


def read_names(node: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def is_literal_size(node: ast.expr) -> bool:
    if isinstance(node, ast.Tuple):
        return all(is_literal_size(item) for item in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) is int


def load_kernelbench(source: dict[str, Any]) -> Reference:
    # Only a problem written for a GPU pays the mode's cost on each torch call it makes.
    on_the_cpu = OnTheCpu if "cuda" in source["problem"] else contextlib.nullcontext
    with on_the_cpu():
        module = exec_module("problem", source["problem"])
    scale_size_constants(module, float(source.get("scale", 1.0)))
    derived = derived_assignments(source["problem"])

    @built_once_per_case
    def model(params: dict[str, Any]) -> torch.nn.Module:
        use_case_sizes(module, params, derived)
        torch.manual_seed(0)  # parameters of nn layers are the same on every run
        with on_the_cpu():
            built: torch.nn.Module = module.Model(*module.get_init_inputs()).eval()
        return built.float() if has_halves(built) else built

    def make_inputs(params: dict[str, Any], generator: torch.Generator) -> list[Any]:
        use_case_sizes(module, params, derived)
        torch.manual_seed(int(generator.initial_seed()))
        with on_the_cpu():
            inputs = upcast_half(list(module.get_inputs()))
        return [*inputs, *state_of(model(params))]

    def compute(inputs: list[Any], params: dict[str, Any]) -> list[Any]:
        with torch.no_grad(), on_the_cpu():
            outputs: list[Any] = upcast_half(as_list(forward_with_state(model(params), inputs)))
        return outputs

    return with_flat_inputs(Reference(make_inputs, compute, model=lambda p: StateAsInputs(
        model(p))))  # fmt: skip


# --- a model's parameters and buffers: inputs of the kernel ----------------------------------
#
# A kernel gets nothing but its inputs, so the model's state (nn.Linear's weight, BatchNorm's
# running mean) comes after the problem's own inputs, in state_dict order: a kernel cannot
# know it otherwise, and a derived case with fewer channels has weights of another shape.
# The reference computes with the tensors it is given (forward_with_state).


ModelTensors = weakref.WeakKeyDictionary[torch.nn.Module, list[torch.Tensor]]
MODEL_STATE: ModelTensors = weakref.WeakKeyDictionary()  # the model's own tensor objects
AS_BUILT: ModelTensors = weakref.WeakKeyDictionary()  # their values when it was built


def built_once_per_case(
    build: Callable[[dict[str, Any]], torch.nn.Module],
) -> Callable[[dict[str, Any]], torch.nn.Module]:
    """`build`, each case's model built once: PyTorch eager's time is its forward alone, not
    the construction and random initialisation of its layers."""
    built: dict[str, torch.nn.Module] = {}

    def model(params: dict[str, Any]) -> torch.nn.Module:
        key = case_key(params)
        if key not in built:
            built[key] = build(params)
            AS_BUILT[built[key]] = [t.detach().clone() for _, t in state_items(built[key])]
        return built[key]

    return model


def state_items(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*model.named_parameters(), *model.named_buffers()]


def state_of(model: torch.nn.Module) -> list[torch.Tensor]:
    """Copies of the state as the model was built: a kernel that writes to one changes no
    model, and no later draw (forward_with_state binds the model to the tensors it is given)."""
    return [tensor.clone() for tensor in AS_BUILT[model]]


def called_with_state(model: torch.nn.Module, inputs: list[Any]) -> Any:
    """The model's forward on the inputs before its state, with the state given after them,
    as torch.export can trace it."""
    names = [name for name, _ in state_items(model)]
    own = inputs[: len(inputs) - len(names)]
    state = dict(zip(names, inputs[len(own) :], strict=True))
    return torch.func.functional_call(model, state, tuple(own))


def forward_with_state(model: torch.nn.Module, inputs: list[Any]) -> Any:
    """called_with_state at the cost of the forward alone, what PyTorch eager's time is: each
    parameter and buffer takes the given tensor's storage (no copy), once for a given tensor.
    functional_call swaps every parameter in and out on each call, which cost more than a
    small problem's whole forward."""
    state = MODEL_STATE.setdefault(model, [tensor for _, tensor in state_items(model)])
    own = inputs[: len(inputs) - len(state)]
    for tensor, given in zip(state, inputs[len(own) :], strict=True):
        if tensor.data_ptr() != given.data_ptr() or tensor.shape != given.shape:
            tensor.data = given
    return model(*own)


class StateAsInputs(torch.nn.Module):
    """The model taking its state as inputs after its own, as a kernel does: what the
    lowering traces (the weights then come from the kernel's inputs, not its source)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Any) -> Any:
        return called_with_state(self.model, list(inputs))


class OnTheCpu(torch.overrides.TorchFunctionMode):
    """A KernelBench problem written for a GPU (`device="cuda"`, `.cuda()`, `.to("cuda")`)
    runs on the CPU, where the reference runs; its half-precision tensors are widened to
    float32 (upcast_half), what a cpu-c kernel takes."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.to:
            args = tuple("cpu" if is_cuda(a) else a for a in args)
        return func(*args, **kwargs)


def is_cuda(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return isinstance(value, str) and value.split(":")[0] == "cuda"


def has_halves(model: torch.nn.Module) -> bool:
    tensors = [*model.parameters(), *model.buffers()]
    return any(t.dtype in HALF_DTYPES for t in tensors)


RUN_AS = "run_as"  # a case's param, set by the importer: the row runs in float32 (see suite_row)
HALF_NAMES = {"float16": "float32", "bfloat16": "float32", "half": "float32"}
HALF_DTYPES = (torch.float16, torch.bfloat16)


class SuiteRow(dict[str, Any]):
    """A test_cases.csv row as NPUKernelBench's runner hands it to get_inputs, get_init_inputs
    and custom_check_precision: a pandas Series read with sep=';'. `row.get(...)`, `row[...]`
    and `row.column` as with a Series; numbers are int or float, True/False bool, an empty cell
    NaN, and everything else (`[128, 256]` too) the cell's text."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


SETTING_PREFIX = "kope_setting"  # a case's param, set by the importer: a setting as a number


def suite_row(params: dict[str, Any]) -> SuiteRow:
    """The case's params as the suite's row. An empty cell is stored as null (JSON has no NaN).
    A row run as float32 names float32 where it names float16 or bfloat16, so the inputs, the
    model and the problem's own tolerances are all float32's."""
    as_float32 = RUN_AS in params
    row = SuiteRow()
    for name, value in params.items():
        if name == RUN_AS or name.startswith(SETTING_PREFIX):
            continue
        if value is None:
            value = float("nan")
        elif as_float32 and isinstance(value, str):
            value = _float32_named(value)
        row[name] = value
    return row


def _float32_named(cell: str) -> str:
    prefix = "torch." if cell.startswith("torch.") else ""
    name = cell.removeprefix(prefix)
    return prefix + HALF_NAMES[name] if name in HALF_NAMES else cell


def upcast_half(value: Any) -> Any:
    """float16 and bfloat16 tensors as float32, in lists and tuples of them too."""
    if isinstance(value, list | tuple):
        return type(value)(upcast_half(item) for item in value)
    if isinstance(value, torch.Tensor) and value.dtype in HALF_DTYPES:
        return value.float()
    return value


def check_precision(
    outputs: Any, outputs_new: Any, max_abs_error: float = 1e-3, max_rel_error: float = 1e-3
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """NPUKernelBench's framework.utils.check_precision: 1 when every element of every output
    is within max_abs_error or within max_rel_error of |expected| (the suite's rule), else 0;
    with the absolute and relative differences, as the suite returns them. Unlike the suite's,
    outputs of another shape, or NaN where the expected value is a number, fail."""
    expected, actual = _as_tensor_list(outputs), _as_tensor_list(outputs_new)
    accurate = len(expected) == len(actual)
    all_abs, all_rel = [torch.zeros(0, dtype=torch.float64)], [torch.zeros(0, dtype=torch.float64)]
    for out, out_new in zip(expected, actual, strict=False):
        if out.shape != out_new.shape:
            accurate = False
            continue
        abs_diff = (out.double() - out_new.double()).abs()
        rel_diff = abs_diff / (out.double().abs() + 1e-7)
        outside = (abs_diff > max_abs_error) & (rel_diff > max_rel_error)
        unequal_nan = out_new.double().isnan() & ~out.double().isnan()
        accurate = accurate and not bool((outside | unequal_nan).any())
        all_abs.append(abs_diff.reshape(-1))
        all_rel.append(rel_diff.reshape(-1))
    return (1 if accurate else 0), torch.cat(all_abs), torch.cat(all_rel)


def _as_tensor_list(values: Any) -> list[torch.Tensor]:
    values = list(values) if isinstance(values, list | tuple) else [values]
    return [v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for v in values]


def install_suite_framework() -> None:
    """`from framework.utils import check_precision`, as the suite's own checkers do; the rest
    of `framework` is stubbed like the other modules that exist only on the suite's hosts."""
    framework = _stub_module("framework")
    utils = types.ModuleType("framework.utils")
    utils.check_precision = check_precision  # type: ignore[attr-defined]
    framework.utils = utils  # type: ignore[attr-defined]
    sys.modules["framework"], sys.modules["framework.utils"] = framework, utils


def check_passed(result: Any) -> bool:
    """What a custom_check_precision answered: a bool, 0/1, or the suite's (passed, abs
    differences, relative differences)."""
    if isinstance(result, tuple | list):
        result = result[0] if result else False
    if isinstance(result, torch.Tensor):
        return bool(result.all())
    return bool(result)


def load_npukernelbench(source: dict[str, str]) -> Reference:
    install_suite_framework()
    module = exec_module("module", source["module"], tolerant=True)
    prepare = exec_module("prepare_inputs", source["prepare_inputs"], tolerant=True)

    def settings(params: dict[str, Any]) -> list[Any]:
        if not hasattr(prepare, "get_init_inputs"):
            return []
        return list(prepare.get_init_inputs(suite_row(params), device=None) or [])

    @built_once_per_case
    def model(params: dict[str, Any]) -> torch.nn.Module:
        torch.manual_seed(0)
        built: torch.nn.Module = module.Model(*settings(params)).eval()
        return built.float() if RUN_AS in params and has_halves(built) else built

    def make_inputs(params: dict[str, Any], generator: torch.Generator) -> list[Any]:
        torch.manual_seed(int(generator.initial_seed()))
        inputs = list(prepare.get_inputs(suite_row(params), device=None))
        return [*(upcast_half(inputs) if RUN_AS in params else inputs),
                *state_of(model(params))]  # fmt: skip

    def compute(inputs: list[Any], params: dict[str, Any]) -> list[Any]:
        with torch.no_grad():
            outputs = as_list(forward_with_state(model(params), inputs))
        return upcast_half(outputs) if RUN_AS in params else outputs

    custom = getattr(prepare, "custom_check_precision", None)

    def check(params: dict[str, Any], expected: list[Any], actual: list[Any]) -> bool:
        assert custom is not None
        return check_passed(custom(suite_row(params), expected, actual))

    return with_flat_inputs(Reference(make_inputs, compute, check if custom is not None else None,
                                      model=lambda p: StateAsInputs(model(p)),
                                      settings=settings))  # fmt: skip


LOADERS = {
    "kope": load_kope,
    "kernelbench": load_kernelbench,
    "npukernelbench": load_npukernelbench,
}


def as_list(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


# --- comparing a compiled kernel against the reference --------------------------------------


class KopeTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64))]  # fmt: skip


def as_kope_tensors(tensors: list[torch.Tensor]) -> tuple[Any, list[Any]]:
    array = (KopeTensor * len(tensors))()
    keep = []  # the shape/stride arrays must outlive the call
    for slot, tensor in zip(array, tensors, strict=True):
        shape = (ctypes.c_int64 * tensor.dim())(*tensor.shape)
        strides = (ctypes.c_int64 * tensor.dim())(*tensor.stride())
        keep += [shape, strides]
        slot.data, slot.dtype, slot.ndim = (
            tensor.data_ptr(),
            KOPE_DTYPES[tensor.dtype],
            tensor.dim(),
        )
        slot.shape, slot.strides = shape, strides
    return array, keep


def run_kernel(
    kernel: Any, inputs: list[torch.Tensor], expected: list[torch.Tensor], attributes: list[float]
) -> list[torch.Tensor]:
    inputs = [t.contiguous() for t in inputs]
    # Contiguous, as the ABI promises, even where the reference returned a view (a transpose).
    outputs = [torch.full(e.shape, float("nan"), dtype=e.dtype) if e.is_floating_point()
               else torch.zeros(e.shape, dtype=e.dtype) for e in expected]  # fmt: skip
    # The shape and stride arrays (second items) must stay alive until the call returns.
    in_array, _in_arrays = as_kope_tensors(inputs)
    out_array, _out_arrays = as_kope_tensors(outputs)
    attrs = (ctypes.c_double * max(1, len(attributes)))(*attributes)
    status = kernel(in_array, len(inputs), out_array, len(outputs), attrs, len(attributes))
    if status != 0:
        raise RuntimeError(f"kope_kernel returned {status}")
    return outputs


def errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    diff = (actual.double() - expected.double()).abs()
    rel = diff / expected.double().abs().clamp_min(1e-12)
    return float(diff.max()) if diff.numel() else 0.0, float(rel.max()) if rel.numel() else 0.0


def within_tolerance(
    actual: torch.Tensor, expected: torch.Tensor, max_abs: float, max_rel: float
) -> bool:
    # An element passes when its error is within max_abs + max_rel * |expected| (allclose).
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if not actual.is_floating_point():
        return bool(torch.equal(actual, expected))
    return bool(torch.allclose(actual, expected, rtol=max_rel, atol=max_abs))


# --- the request loop ----------------------------------------------------------------------

SCALARS = (bool, int, float)


def describe(value: Any, *, scalar_ok: bool = False) -> dict[str, Any]:
    """Shape and dtype of a tensor; a scalar input (NPUKernelBench has some): type and value."""
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if scalar_ok and isinstance(value, SCALARS):
        return {"scalar": type(value).__name__, "value": value}
    raise TypeError(f"the reference gave {type(value).__name__}, not a tensor")


def tensors(values: list[Any]) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def scalar_attributes(values: list[Any]) -> list[float]:
    """Scalar inputs reach the kernel as attributes, after the declared ones, in input order."""
    return [float(v) for v in values if isinstance(v, SCALARS)]


def run_case(
    reference: Reference,
    case: dict[str, Any],
    request: dict[str, Any],
    kernel: Any,
    attributes: list[float],
) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(int(request.get("seed", 0)))
    inputs = reference.make_inputs(case["params"], generator)
    snapshot = [t.clone() for t in tensors(inputs)]
    given = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
    expected = as_list(reference.compute(given, case["params"]))
    result: dict[str, Any] = {
        "case_id": case["case_id"],
        "inputs": [describe(v, scalar_ok=True) for v in inputs],
        "outputs": [describe(t) for t in expected],
    }
    if reference.settings is not None:
        result["settings"] = [described_setting(v) for v in reference.settings(case["params"])]
    if kernel is not None:
        all_attributes = attributes + scalar_attributes(inputs)
        actual = run_kernel(kernel, tensors(inputs), expected, all_attributes)
        result["check"] = compare(actual, expected, tensors(inputs), snapshot, request, reference,
                                  case)  # fmt: skip
    return result


def described_setting(value: Any) -> dict[str, Any]:
    """One of the values a case's model is built with, as the importer can pass it to a
    kernel: {"number": n} (bools too), {"text": s}, or {"other": type name}."""
    if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
        return {"number": float(value)}
    if isinstance(value, str):
        return {"text": value}
    return {"other": type(value).__name__}


def compare(
    actual: list[Any],
    expected: list[Any],
    inputs: list[Any],
    snapshot: list[Any],
    request: dict[str, Any],
    reference: Reference,
    case: dict[str, Any],
) -> dict[str, Any]:
    pairs = list(zip(actual, expected, strict=True))
    measured = [errors(a, e) for a, e in pairs]
    if reference.check is not None:
        passed = bool(reference.check(case["params"], expected, actual))
    else:
        passed = all(
            within_tolerance(a, e, request["max_abs"], request["max_rel"]) for a, e in pairs
        )
    inputs_intact = all(torch.equal(a, b) for a, b in zip(inputs, snapshot, strict=True))
    return {
        "passed": passed and inputs_intact,
        "inputs_intact": inputs_intact,
        "max_abs": max(m[0] for m in measured),
        "max_rel": max(m[1] for m in measured),
    }


def load_kernel(path: str | None) -> Any:
    if not path:
        return None
    kernel = ctypes.CDLL(path).kope_kernel
    kernel.restype = ctypes.c_int
    return kernel


def lowered(reference: Reference, cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The reference's model lowered to a naive C kernel for every kind of call the cases
    make: {"source": ..., "left_out": [why, ...]}, or {"error": ...} naming what stopped it."""
    from apps.operators.lowering import LoweringError, lower_variants

    if reference.model is None:
        return {"error": "the reference is no Model to lower (a KOPE reference function)"}
    build = reference.model
    examples = ((functools.partial(build, case["params"]), inputs, case.get("attributes", []),
                 case.get("outputs"))
                for case, inputs in examples_to_trace(reference, cases))  # fmt: skip
    try:
        source, left_out = lower_variants(examples)
    except LoweringError as error:
        return {"error": str(error)}
    return {"source": source, "left_out": left_out}


Example = tuple[dict[str, Any], list[Any]]  # a case and the inputs made for it


def examples_to_trace(reference: Reference, cases: list[dict[str, Any]]) -> Iterator[Example]:
    """Every case with its inputs, the first case of each kind of call first: one trace covers
    every size of its ranks, but not another rank or dtype, a size of 1 (torch.export fixes
    those) or another scalar value, so those come first; a later case is traced only when
    no trace takes it (a size the model fixes, such as LayerNorm's normalized_shape, built
    from the case's settings). The inputs are made again for the later cases rather than
    all kept at once. (A setting the model is built with that changes no size, such as an
    NPUKernelBench row's `n`, is no part of the call: a kernel cannot tell two cases apart
    by it.)"""
    first: set[str] = set()
    for case in cases:
        inputs = example_inputs(reference, case)
        if call_kind(inputs) not in first:
            first.add(call_kind(inputs))
            yield case, inputs
    for case in cases:
        inputs = example_inputs(reference, case)
        if call_kind(inputs) in first:
            first.discard(call_kind(inputs))  # this kind's first case: yielded above
            continue
        yield case, inputs


def example_inputs(reference: Reference, case: dict[str, Any]) -> list[Any]:
    return list(reference.make_inputs(case["params"], torch.Generator().manual_seed(0)))


def call_kind(inputs: list[Any]) -> str:
    return case_key([(str(v.dtype), [d == 1 for d in v.shape]) if isinstance(v, torch.Tensor)
                     else v for v in inputs])  # fmt: skip


def serve(request: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(int(request.get("threads", 1)))
    reference = LOADERS[request["kind"]](request["source"])
    mode = request.get("mode", "outcomes")
    if mode == "generate":
        return {"runs": [generate_safely(reference, run, request) for run in request["runs"]]}
    if mode == "check":
        return {"checks": [custom_check(reference, item) for item in request["checks"]]}
    if mode == "lower":
        return lowered(reference, request["cases"])
    kernel = load_kernel(request.get("kernel_so"))
    answers = []
    for index, case in enumerate(request["cases"]):
        attributes = request.get("attributes", [[]] * len(request["cases"]))[index]
        try:
            answers.append(run_case(reference, case, request, kernel, attributes))
        except Exception as error:
            answers.append({"case_id": case["case_id"], "error": _error_text(error)})
            if _out_of_memory(error):
                break  # the next case would only fail the same way, slowly
    return {"cases": answers}


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or "DefaultCPUAllocator: can't allocate" in str(error)


def _error_text(error: BaseException) -> str:
    if _out_of_memory(error):
        return "the reference ran out of memory (KOPE_REFERENCE_MEMORY_MB limits it)"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<")]
    if not frames:
        return f"{type(error).__name__}: {error}"
    source = SOURCE_FILES.get(frames[-1].filename.strip("<>"), frames[-1].filename)
    return f"{type(error).__name__}: {error} ({source} line {frames[-1].lineno})"


# The names exec_module gives each layout's files, and the files they are on disk.
SOURCE_FILES = {
    "reference": "reference.py",
    "problem": "the problem file",
    "module": "validation/module.py",
    "prepare_inputs": "validation/prepare_inputs.py",
}


# --- generating evaluation data: inputs for the candidate, expected outputs for the judge ----


def generate_safely(
    reference: Reference, run: dict[str, Any], request: dict[str, Any]
) -> dict[str, Any]:
    try:
        return generate(reference, run, request)
    except Exception as error:  # a reference may raise anything
        return {"run_id": run["run_id"], "error": _error_text(error)}


def generate(reference: Reference, run: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """Make one run's inputs from its seed, compute the expected outputs, write both as raw files.

    Inputs go to `input_dir` (the candidate gets them), expected outputs to `expected_dir`
    (only the judge reads them). The seed never leaves the trusted side.
    """
    generator = torch.Generator().manual_seed(int(run["seed"]))
    inputs = reference.make_inputs(run["params"], generator)
    given = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
    expected = as_list(reference.compute(given, run["params"]))
    stem = run["run_id"]
    written_inputs = [write_tensor(t, Path(request["input_dir"]) / f"{stem}.in{i}")
                      for i, t in enumerate(tensors(inputs))]  # fmt: skip
    written_outputs = [write_tensor(t, Path(request["expected_dir"]) / f"{stem}.out{i}")
                       for i, t in enumerate(expected)]  # fmt: skip
    # Index inputs may legitimately repeat one value; data inputs must not be constant.
    constant = [f"input {i}" for i, t in enumerate(tensors(inputs))
                if t.is_floating_point() and is_constant(t)]  # fmt: skip
    return {"run_id": stem, "inputs": written_inputs, "outputs": written_outputs,
            "scalars": scalar_attributes(inputs), "constant_inputs": constant}  # fmt: skip


def write_tensor(tensor: Any, path: Path) -> dict[str, Any]:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"the reference gave {type(tensor).__name__}, not a tensor")
    data = tensor.detach().contiguous().numpy()
    data.tofile(path)
    return {"file": path.name, "dtype": str(data.dtype), "shape": list(data.shape),
            "sha256": hashlib.sha256(data.tobytes()).hexdigest()}  # fmt: skip


def is_constant(tensor: torch.Tensor) -> bool:
    flat = tensor.reshape(-1)
    return flat.numel() > 1 and bool((flat == flat[0]).all())


def custom_check(reference: Reference, item: dict[str, Any]) -> dict[str, Any]:
    """The operator's own correctness rule (NPUKernelBench's custom_check_precision)."""
    try:
        expected = [read_tensor(Path(item["dir"]) / f["file"], f) for f in item["expected"]]
        actual = [read_tensor(Path(item["dir"]) / f["file"], f) for f in item["actual"]]
        assert reference.check is not None
        return {
            "run_id": item["run_id"],
            "passed": bool(reference.check(item["params"], expected, actual)),
        }
    except Exception as error:  # a checker may raise anything
        return {"run_id": item["run_id"], "passed": False, "error": _error_text(error)}


def read_tensor(path: Path, meta: dict[str, Any]) -> torch.Tensor:
    array = numpy.fromfile(path, dtype=meta["dtype"]).reshape(meta["shape"])
    return torch.from_numpy(array)


def serve_safely(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return serve(request)
    except Exception as error:  # a reference may raise anything
        return {"error": _error_text(error)}


def answer_to(request: dict[str, Any]) -> dict[str, Any]:
    if "batch" in request:  # several operators in one process: torch is imported once
        return {"batch": [serve_safely(r) for r in request["batch"]]}
    return serve_safely(request)


def main() -> None:
    if sys.argv[1:] == ["--warm"]:
        serve_orders()
        return
    request = json.load(sys.stdin)
    forbid_what_a_reference_never_needs()
    # Whatever the reference or a kernel prints (Python or C) goes to stderr: stdout carries
    # only the answer.
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    answer = answer_to(request)
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)


def forbid_what_a_reference_never_needs() -> None:
    """The reference step's own filter, once Python and PyTorch are loaded: no program."""
    own_filter = policies.POLICIES[Step.REFERENCE].own_filter
    assert own_filter is not None
    seccomp.install(own_filter)


# --- kept warm: a forked child per order ---------------------------------------------------


def serve_orders() -> None:
    """Until stdin closes: one order per line, one line back per order."""
    # Ctrl-C is meant for the process that started this one; it ends when that one closes
    # stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sandbox_ids()  # looked up once, before any fork: the children cannot read /etc then
    for line in sys.stdin:
        sys.stdout.write(json.dumps(serve_forked(json.loads(line))) + "\n")
        sys.stdout.flush()


def serve_forked(order: dict[str, Any]) -> dict[str, Any]:
    """The order's request served in a child; its exit code (negative: the signal that ended
    it), and whether it ran past the order's time and was killed."""
    runner = os.getpid()
    pid = os.fork()
    if pid == 0:
        serve_in_child(order, runner)
    timed_out = not exited_within(pid, float(order["timeout_s"]))
    if timed_out:
        kill_group(pid)
    _, status = os.waitpid(pid, 0)
    return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}


def exited_within(pid: int, timeout_s: float) -> bool:
    pidfd = os.pidfd_open(pid)
    try:
        return bool(select.select([pidfd], [], [], timeout_s)[0])
    finally:
        os.close(pidfd)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # killed before it made its own group
        os.kill(pid, signal.SIGKILL)


def serve_in_child(order: dict[str, Any], runner: int) -> NoReturn:
    """As a fresh runner would: its own session, its output in the order's stderr file, then
    confined by the reference step's policy (ended with the runner, its work dir as its
    current folder), the answer in the order's answer file there."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        workdir = Path(order["workdir"])
        output_to(str(workdir / order["stderr_file"]))
        policies.confine_forked(Step.REFERENCE, workdir, Limits(**order["limits"]), parent=runner)
        os.environ["OMP_NUM_THREADS"] = str(int(order["request"].get("threads", 1)))
        os.environ["TMPDIR"] = str(workdir)
        answer = answer_to(order["request"])
        Path(order["answer_file"]).write_text(json.dumps(answer))
        code = 0
    except BaseException:  # whatever ended it, the parent reads why from the stderr file
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def output_to(path: str) -> None:
    """Standard output and error into `path` (what a reference prints is no answer), standard
    input from nothing: the runner's own pipes stay out of the child's reach."""
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(nothing, 0)
    os.close(log)
    os.close(nothing)
    sys.stdout = sys.stderr


if __name__ == "__main__":
    main()
