"""Operator specs: what an operator is, parsed and validated without a database.

A built-in operator is a folder with `operator.toml` (this spec), `reference.py` (PyTorch) and
`naive.c` (the starting kernel for the cpu-c target). Importers build the same spec.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import asdict, dataclass, field
from typing import Any

FAMILIES = (
    "elementwise", "activation", "reduction", "normalization", "loss", "scan", "matmul",
    "convolution", "attention", "data movement",
)  # fmt: skip
LEVELS = (1, 2, 3)
DTYPES = (
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
    "bool",
)  # fmt: skip
ATTRIBUTE_TYPES = ("int", "float", "bool")
CASE_DTYPE = "case"  # a tensor whose dtype is the test case's dtype
PER_CASE = "*"  # a dimension that differs per case; the case records the actual shape
SLUG = re.compile(r"^[a-z0-9][a-z0-9_]{0,62}$")
DEFAULT_TOLERANCE = 1e-3


class SpecError(ValueError):
    """A spec that cannot be used; the message says what and where."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: list[int | str]  # sizes, or names of case parameters

    def resolved_dtype(self, case_dtype: str) -> str:
        return case_dtype if self.dtype == CASE_DTYPE else self.dtype

    def resolved_shape(self, params: dict[str, Any]) -> list[int | str]:
        """Sizes for a case; PER_CASE dimensions stay PER_CASE (the case records them)."""
        return [int(params[d]) if isinstance(d, str) and d != PER_CASE else d for d in self.shape]


@dataclass(frozen=True)
class AttributeSpec:
    name: str
    type: str
    default: int | float | bool


@dataclass(frozen=True)
class CaseSpec:
    case_id: str
    params: dict[str, Any]
    dtype: str = "float32"  # "" in imports: the dtype the reference produces
    timing: bool = False


@dataclass(frozen=True)
class OperatorSpec:
    slug: str
    name: str
    family: str
    level: int
    description: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    attributes: list[AttributeSpec] = field(default_factory=list)
    cases: list[CaseSpec] = field(default_factory=list)
    max_abs: float = DEFAULT_TOLERANCE
    max_rel: float = DEFAULT_TOLERANCE
    order: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def attribute_values(self, params: dict[str, Any]) -> list[float]:
        """Scalar attributes in declared order, as the kernel receives them."""
        return [float(params.get(a.name, a.default)) for a in self.attributes]


def parse_operator_toml(text: str, *, where: str) -> OperatorSpec:
    try:
        raw = tomllib.loads(text)
    except ValueError as error:  # TOMLDecodeError, and an integer of over 4300 digits
        raise SpecError(f"{where}: not valid TOML: {error}") from None
    except RecursionError:
        raise SpecError(f"{where}: not valid TOML: nested too deeply") from None
    try:
        spec = spec_from_dict(raw)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        raise SpecError(f"{where}: {_describe(error)}") from None
    validate(spec, where=where)
    return spec


def _describe(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing key {error.args[0]!r}"
    return str(error)


def spec_from_dict(raw: dict[str, Any]) -> OperatorSpec:
    tolerance = raw.get("tolerance", {})
    return OperatorSpec(
        slug=str(raw["slug"]),
        name=str(raw["name"]),
        family=str(raw["family"]),
        level=_whole(raw["level"], "level"),
        description=str(raw["description"]).strip(),
        inputs=[_tensor(t) for t in raw["inputs"]],
        outputs=[_tensor(t) for t in raw["outputs"]],
        attributes=[_attribute(a) for a in raw.get("attributes", [])],
        cases=[_case(c) for c in raw["cases"]],
        max_abs=float(tolerance.get("max_abs", DEFAULT_TOLERANCE)),
        max_rel=float(tolerance.get("max_rel", DEFAULT_TOLERANCE)),
        order=_whole(raw.get("order", 0), "order"),
    )


def _whole(value: Any, what: str) -> int:
    """int(), but a float, text or true/false is an error rather than turned into a number."""
    if type(value) is not int:
        raise ValueError(f"{what} = {value!r} is not a whole number")
    return value


def _tensor(raw: dict[str, Any]) -> TensorSpec:
    # Kept as written: int() made 2.7 a 2 and true a 1 (_tensor_problems says what is wrong).
    return TensorSpec(name=str(raw["name"]), dtype=str(raw["dtype"]), shape=list(raw["shape"]))


def _attribute(raw: dict[str, Any]) -> AttributeSpec:
    return AttributeSpec(name=str(raw["name"]), type=str(raw["type"]), default=raw["default"])


def _case(raw: dict[str, Any]) -> CaseSpec:
    timing = raw.get("timing", False)
    if type(timing) is not bool:  # bool("no") is True
        raise ValueError(f"case {raw.get('id')!r}: timing = {timing!r} is not true or false")
    return CaseSpec(
        case_id=str(raw["id"]),
        params=dict(raw.get("params", {})),
        dtype=str(raw.get("dtype", "float32")),
        timing=timing,
    )


def validate(spec: OperatorSpec, *, where: str) -> None:
    problems = [*_header_problems(spec), *_tensor_problems(spec), *_case_problems(spec)]
    if problems:
        raise SpecError(f"{where}: " + "; ".join(problems))


def _header_problems(spec: OperatorSpec) -> list[str]:
    problems = []
    if not SLUG.match(spec.slug):
        problems.append(f"slug {spec.slug!r} must be lowercase letters, digits and _")
    if spec.family not in FAMILIES:
        problems.append(f"family {spec.family!r} is not one of {', '.join(FAMILIES)}")
    if spec.level not in LEVELS:
        problems.append(f"level {spec.level} is not 1, 2 or 3")
    if not spec.outputs:
        problems.append("an operator needs at least one output")
    if not (0 < spec.max_abs < math.inf and 0 < spec.max_rel < math.inf):  # nan fails too
        problems.append("tolerances must be positive and finite")
    for attribute in spec.attributes:
        if attribute.type not in ATTRIBUTE_TYPES:
            problems.append(f"attribute {attribute.name!r} has unknown type {attribute.type!r}")
        if not _is_number(attribute.default):
            problems.append(f"attribute {attribute.name!r} default {attribute.default!r} "
                            "is not a finite number")  # fmt: skip
    return problems


def _tensor_problems(spec: OperatorSpec) -> list[str]:
    problems = []
    names = [t.name for t in spec.inputs + spec.outputs]
    if len(set(names)) != len(names):
        problems.append("input and output names must be unique")
    for tensor in spec.inputs + spec.outputs:
        if tensor.dtype != CASE_DTYPE and tensor.dtype not in DTYPES:
            problems.append(f"tensor {tensor.name!r} has unknown dtype {tensor.dtype!r}")
        problems += [f"tensor {tensor.name!r}: dimension {d!r} is neither a size (a whole "
                     "number, 0 or more) nor a case parameter's name"
                     for d in tensor.shape if not _is_dimension(d)]  # fmt: skip
    return problems


def _is_dimension(value: Any) -> bool:
    return isinstance(value, str) or (type(value) is int and value >= 0)


def _case_problems(spec: OperatorSpec) -> list[str]:
    problems = []
    if not spec.cases:
        problems.append("an operator needs at least one test case")
    ids = [c.case_id for c in spec.cases]
    if len(set(ids)) != len(ids):
        problems.append("test case ids must be unique")
    symbols = {
        d
        for t in spec.inputs + spec.outputs
        for d in t.shape
        if isinstance(d, str) and d != PER_CASE
    }
    for case in spec.cases:
        missing = symbols - case.params.keys()
        if missing:
            problems.append(
                f"case {case.case_id!r} gives no value for {', '.join(sorted(missing))}"
            )
        if case.dtype not in DTYPES:
            problems.append(f"case {case.case_id!r} has unknown dtype {case.dtype!r}")
        problems += _case_value_problems(spec, case, symbols)
    return problems


def _case_value_problems(spec: OperatorSpec, case: CaseSpec, symbols: set[str]) -> list[str]:
    """Values a run could not use (a size that is text) or PostgreSQL could not store (nan)."""
    problems = []
    attributes = {a.name for a in spec.attributes}
    for name, value in case.params.items():
        if name in symbols and (type(value) is not int or value < 0):
            problems.append(f"case {case.case_id!r}: {name} = {value!r} is not a size "
                            "(a whole number, 0 or more)")  # fmt: skip
        elif name in attributes and not _is_number(value):
            problems.append(f"case {case.case_id!r}: attribute {name} = {value!r} "
                            "is not a finite number")  # fmt: skip
        elif not _storable(value):
            problems.append(f"case {case.case_id!r}: {name} = {value!r} is not a finite "
                            "number, text, true/false, or a list or table of those")  # fmt: skip
    return problems


def _is_number(value: Any) -> bool:
    return type(value) in (int, float, bool) and math.isfinite(value)


def _storable(value: Any) -> bool:
    """What a case's parameters may hold: JSON without NaN, Infinity or NUL (no TOML dates)."""
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    if isinstance(value, dict):
        return all(_storable(key) and _storable(item) for key, item in value.items())
    return _is_number(value)


def spec_from_json(raw: dict[str, Any]) -> OperatorSpec:
    """The inverse of OperatorSpec.as_json (what a stored version keeps)."""
    return OperatorSpec(
        **{k: v for k, v in raw.items() if k not in ("inputs", "outputs", "attributes", "cases")},
        inputs=[TensorSpec(**t) for t in raw["inputs"]],
        outputs=[TensorSpec(**t) for t in raw["outputs"]],
        attributes=[AttributeSpec(**a) for a in raw["attributes"]],
        cases=[CaseSpec(**c) for c in raw["cases"]],
    )
