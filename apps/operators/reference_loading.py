"""An operator's reference as the reference runner (apps/operators/refrun.py) loads it: the
three layouts (KOPE, KernelBench, NPUKernelBench) each loaded to a Reference that makes a
case's inputs and computes its expected outputs, with its inputs and outputs flat as a kernel
sees them, and a Model's parameters and buffers among the kernel's inputs. Like the runner,
it imports nothing of Django: it runs under the sandbox's interpreter.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import json
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from apps.operators.scaling import scaled_size


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
