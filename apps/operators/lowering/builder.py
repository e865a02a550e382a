"""The kernel being written: C lines, the buffer behind each graph value, loop helpers.

Every tensor value of the graph lives in a contiguous row-major buffer named after its fx
node. Ops that only reinterpret a contiguous buffer (view, unsqueeze, clone...) alias their
input's buffer; every other op writes a fresh buffer, malloc'ed at the top of the kernel and
freed at the end, or, when the value is one of the model's outputs, the caller's output.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sympy  # type: ignore[import-untyped]
import torch

from apps.operators.lowering.errors import LoweringError
from apps.operators.lowering.symbolic import c_float, c_int, loop_var, product, to_expr

C_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.int32: "int32_t",
    torch.int64: "int64_t",
    torch.uint8: "uint8_t",
    torch.bool: "uint8_t",
}
KOPE_DTYPES = {
    torch.float32: "KOPE_FLOAT32",
    torch.float64: "KOPE_FLOAT64",
    torch.int32: "KOPE_INT32",
    torch.int64: "KOPE_INT64",
    torch.uint8: "KOPE_UINT8",
    torch.bool: "KOPE_BOOL",
}
# Names a buffer must not take: the kernel's own variables, the locals the op loops declare,
# <math.h> functions, C keywords. Single letters with digits (i0, x1, k2...) are loop indices.
RESERVED = {
    "inputs", "outputs", "attrs", "n_inputs", "n_outputs", "n_attrs", "status", "done",
    "acc", "best", "at", "top", "sum", "squares", "mean", "rstd", "var", "row", "base",
    "window", "inside", "scale", "shift", "icg", "cg", "oc", "ic", "first",
    "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "cbrt", "pow", "sin",
    "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "erf", "erfc", "lgamma", "tgamma", "floor", "ceil", "trunc", "round", "rint",
    "nearbyint", "fabs", "fmod", "fmax", "fmin", "hypot", "copysign", "isnan", "isinf",
    "isfinite", "signbit", "nan", "abs", "labs", "llabs", "malloc", "free", "memcpy",
    "memset", "size_t", "int64_t", "int32_t", "uint8_t", "auto", "break", "case", "char",
    "const", "continue", "default", "do", "double", "else", "enum", "extern", "float", "for",
    "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short",
    "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "bool", "true", "false", "main",
}  # fmt: skip
LOCAL_PATTERN = re.compile(r"[A-Za-z]{1,2}\d*|(start|end|t)\d+")


def ctype(dtype: torch.dtype) -> str:
    if dtype not in C_TYPES:
        raise LoweringError(f"dtype {dtype}: not lowered (the kernel ABI has no such type)")
    return C_TYPES[dtype]


def is_float(dtype: torch.dtype) -> bool:
    return dtype in (torch.float32, torch.float64)


def math_fn(name: str, dtype: torch.dtype) -> str:
    """<math.h> function for the compute type: expf for float, exp for double."""
    return name + "f" if dtype == torch.float32 else name


def literal(value: Any, dtype: torch.dtype) -> str:
    """A Python scalar (or symbolic size) as a C expression of the given dtype."""
    if isinstance(value, (torch.fx.Node, torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = to_expr(value)
        text = c_int(expr) if expr.is_integer else c_float(expr)
        return f"(({ctype(dtype)}){text})"
    if isinstance(value, bool) or dtype == torch.bool:
        return "1" if value else "0"
    if isinstance(value, float):
        if value != value:
            text = "NAN"
        elif value in (float("inf"), float("-inf")):
            text = "INFINITY" if value > 0 else "(-INFINITY)"
        else:
            text = value.hex()
        return f"(({ctype(dtype)}){text})"
    if isinstance(value, int):
        return f"(({ctype(dtype)}){c_int(sympy.Integer(value))})"
    raise LoweringError(f"scalar {value!r}: not lowered")


@dataclass(frozen=True)
class Buffer:
    """A contiguous tensor in C: its pointer variable, dtype and (symbolic) shape."""

    name: str
    dtype: torch.dtype
    dims: tuple[sympy.Expr, ...]

    @property
    def ctype(self) -> str:
        return ctype(self.dtype)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def numel(self) -> sympy.Expr:
        return product(self.dims)

    def at(self, offset: sympy.Expr) -> str:
        return f"{self.name}[{c_int(offset)}]"


def meta_value(node: torch.fx.Node, index: int | None = None) -> Any:
    value: Any = node.meta.get("val")
    if index is not None:
        value = value[index]
    return value


def meta_dims(node: torch.fx.Node, index: int | None = None) -> tuple[sympy.Expr, ...]:
    return tuple(to_expr(d) for d in meta_value(node, index).shape)


def meta_dtype(node: torch.fx.Node, index: int | None = None) -> torch.dtype:
    dtype: torch.dtype = meta_value(node, index).dtype
    return dtype


def op_name(node: torch.fx.Node) -> str:
    return str(node.target)


def bind_args(node: torch.fx.Node) -> dict[str, Any]:
    """The op's arguments by schema name, with the schema's defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    bound: dict[str, Any] = {}
    for position, argument in enumerate(schema.arguments):
        if position < len(node.args):
            bound[argument.name] = node.args[position]
        elif argument.name in node.kwargs:
            bound[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
        else:
            bound[argument.name] = None
    return bound


class Kernel:
    """Accumulates the C source of one kope_kernel function."""

    def __init__(self) -> None:
        self.globals: list[str] = []
        self.prologue: list[str] = []
        self.temporaries: list[str] = []
        self.body: list[str] = []
        self.values: dict[torch.fx.Node, Buffer] = {}
        self.output_slots: dict[torch.fx.Node, str] = {}
        self.written_outputs: set[str] = set()
        self._names: set[str] = set(RESERVED)
        self._depth = 1

    # --- names and lines ---

    def unique_name(self, wanted: str) -> str:
        name = re.sub(r"\W", "_", wanted)
        if not re.match(r"[A-Za-z]", name) or LOCAL_PATTERN.fullmatch(name):
            name = "t_" + name
        candidate, suffix = name, 1
        while candidate in self._names or candidate.startswith(("kope_", "KOPE_", "INT")):
            candidate, suffix = f"{name}_{suffix}", suffix + 1
        self._names.add(candidate)
        return candidate

    def line(self, text: str) -> None:
        self.body.append("    " * self._depth + text)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(f"{header} {{" if header else "{")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self.line("}")

    @contextmanager
    def op(self, node: torch.fx.Node) -> Iterator[None]:
        """The block holding one op's loops; a comment names the ATen op and its value."""
        self.line(f"/* {node.name} = {op_name(node)} */")
        with self.block(""):
            yield

    @contextmanager
    def loops(self, sizes: Sequence[sympy.Expr], prefix: str = "i") -> Iterator[list[sympy.Expr]]:
        """A loop nest over `sizes`; yields the index variables (sympy symbols)."""
        names = [f"{prefix}{d}" for d in range(len(sizes))]
        opened = 0
        try:
            for name, size in zip(names, sizes, strict=True):
                self.line(f"for (int64_t {name} = 0; {name} < {c_int(size)}; ++{name}) {{")
                self._depth += 1
                opened += 1
            yield [loop_var(n) for n in names]
        finally:
            for _ in range(opened):
                self._depth -= 1
                self.line("}")

    # --- buffers ---

    def value(self, node: Any) -> Buffer:
        if not isinstance(node, torch.fx.Node) or node not in self.values:
            raise LoweringError(f"operand {node!r}: not a lowered tensor")
        return self.values[node]

    def alias(self, node: torch.fx.Node, source: Buffer) -> Buffer:
        """`node` reads the same memory as `source` (a view of a contiguous buffer)."""
        buffer = Buffer(source.name, meta_dtype(node), meta_dims(node))
        if buffer.dtype != source.dtype:
            raise LoweringError(f"{op_name(node)}: a view that changes dtype is not lowered")
        self.values[node] = buffer
        return buffer

    def new_buffer(self, node: torch.fx.Node, index: int | None = None) -> Buffer:
        """A fresh buffer for `node` (or for item `index` of a tuple-valued node)."""
        target = node if index is None else self.tuple_item(node, index)
        if target is None:
            raise LoweringError(f"{op_name(node)}: item {index} is not used")
        dtype, dims = meta_dtype(node, index), meta_dims(node, index)
        name = self.unique_name(target.name)
        c = ctype(dtype)
        if target in self.output_slots:
            slot = self.output_slots.pop(target)
            self.written_outputs.add(slot)
            self.prologue.append(f"{c} *{name} = ({c} *){slot};")
        else:
            self.temporaries.append(name)
            self.prologue.append(f"{c} *{name} = NULL;")
            size = f"(size_t)({c_int(product(dims))}) * sizeof({c})"
            self.line(f"{name} = ({c} *)kope_alloc({size});")
            self.line(f"if ({name} == NULL) {{ status = 1; goto done; }}")
        buffer = Buffer(name, dtype, dims)
        self.values[target] = buffer
        return buffer

    def tuple_item(self, node: torch.fx.Node, index: int) -> torch.fx.Node | None:
        """The getitem node that reads item `index` of a tuple-valued op, if any."""
        for user in node.users:
            if user.target.__name__ == "getitem" and user.args[1] == index:  # type: ignore[union-attr]
                return user
        return None

    def source(self) -> str:
        return "\n".join(self.body)
