"""Symbolic sizes (sympy expressions from torch.export's shape environment) printed as C.

Sizes that come from inputs are symbols (`s0`, `s97`, ...) bound at the top of the kernel to
`inputs[i].shape[d]`; everything derived from them (a convolution's output size, a flattened
view) is an expression over those symbols, printed here as int64_t C arithmetic.
"""

from __future__ import annotations

from typing import Any

import sympy  # type: ignore[import-untyped]
import torch
from torch.utils._sympy import functions as symfn

from apps.operators.lowering.errors import LoweringError

INT32_LIMIT = 2**31


def to_expr(value: Any) -> sympy.Expr:
    """A size (int, SymInt, SymFloat, or an fx node computing one) as a sympy expression."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    if isinstance(value, bool):
        return sympy.Integer(int(value))
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, float):
        return sympy.Float(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return sympy.sympify(value.node.expr)
    if isinstance(value, sympy.Basic):
        return sympy.sympify(value)
    raise LoweringError(f"size {value!r}: not a number or symbolic size")


def int_literal(value: int) -> str:
    return str(value) if -INT32_LIMIT < value < INT32_LIMIT else f"INT64_C({value})"


def c_int(expr: sympy.Basic) -> str:
    """An integer-valued expression as C (int64_t arithmetic)."""
    if isinstance(expr, sympy.Integer):
        return int_literal(int(expr))
    if isinstance(expr, sympy.Symbol):
        return str(expr.name)
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(c_int(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + " * ".join(c_int(a) for a in expr.args) + ")"
    if isinstance(expr, (sympy.Pow, symfn.PowByNatural)):
        base, exp = expr.args
        if isinstance(exp, sympy.Integer) and 0 <= int(exp) <= 8:
            return "(" + " * ".join([c_int(base)] * int(exp)) + ")" if int(exp) else "1"
    if isinstance(expr, (symfn.FloorDiv, symfn.CleanDiv)):
        return f"kope_floordiv({c_int(expr.args[0])}, {c_int(expr.args[1])})"
    if isinstance(expr, symfn.CeilDiv):
        num, den = (c_int(a) for a in expr.args)
        return f"(-kope_floordiv(-{num}, {den}))"
    if isinstance(expr, symfn.ModularIndexing):
        base, div, mod = (c_int(a) for a in expr.args)
        return f"kope_mod(kope_floordiv({base}, {div}), {mod})"
    if isinstance(expr, (sympy.Mod, symfn.Mod, symfn.PythonMod)):
        return f"kope_mod({c_int(expr.args[0])}, {c_int(expr.args[1])})"
    if isinstance(expr, (sympy.Max, sympy.Min, symfn.Max, symfn.Min)):
        helper = "kope_max" if isinstance(expr, (sympy.Max, symfn.Max)) else "kope_min"
        text = c_int(expr.args[0])
        for arg in expr.args[1:]:
            text = f"{helper}({text}, {c_int(arg)})"
        return text
    if isinstance(expr, (symfn.FloorToInt, symfn.TruncToInt)):
        fn = "floor" if isinstance(expr, symfn.FloorToInt) else "trunc"
        return f"((int64_t){fn}({c_float(expr.args[0])}))"
    if isinstance(expr, symfn.CeilToInt):
        return f"((int64_t)ceil({c_float(expr.args[0])}))"
    raise LoweringError(f"symbolic size {expr}: not lowered")


FLOAT_FUNCTIONS = {
    symfn.OpaqueUnaryFn_sqrt: "sqrt",
    symfn.OpaqueUnaryFn_exp: "exp",
    symfn.OpaqueUnaryFn_log: "log",
    symfn.OpaqueUnaryFn_sin: "sin",
    symfn.OpaqueUnaryFn_cos: "cos",
    symfn.OpaqueUnaryFn_tanh: "tanh",
}


def c_float(expr: sympy.Basic) -> str:
    """A real-valued expression (SymFloat, e.g. attention's 1/sqrt(E)) as C double arithmetic."""
    if isinstance(expr, sympy.Integer):
        return f"{int(expr)}.0"
    if isinstance(expr, sympy.Rational):
        return f"({expr.p}.0 / {expr.q}.0)"
    if isinstance(expr, sympy.Float):
        return float(expr).hex()
    if isinstance(expr, sympy.Symbol):
        return f"((double){expr.name})"
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(c_float(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + " * ".join(c_float(a) for a in expr.args) + ")"
    if isinstance(expr, (sympy.Pow, symfn.FloatPow)):
        return f"pow({c_float(expr.args[0])}, {c_float(expr.args[1])})"
    if isinstance(expr, (symfn.FloatTrueDiv, symfn.IntTrueDiv)):
        return f"({c_float(expr.args[0])} / {c_float(expr.args[1])})"
    if isinstance(expr, symfn.ToFloat):
        return f"((double){c_int(expr.args[0])})"
    for cls, fn in FLOAT_FUNCTIONS.items():
        if isinstance(expr, cls):
            return f"{fn}({c_float(expr.args[0])})"
    if expr.is_integer:
        return f"((double){c_int(expr)})"
    raise LoweringError(f"symbolic value {expr}: not lowered")


def product(exprs: list[sympy.Expr] | tuple[sympy.Expr, ...]) -> sympy.Expr:
    result: sympy.Expr = sympy.Integer(1)
    for e in exprs:
        result = result * e
    return result


def row_major_offset(dims: tuple[sympy.Expr, ...], index: list[sympy.Expr]) -> sympy.Expr:
    """The element offset of `index` in a contiguous tensor of shape `dims`."""
    offset: sympy.Expr = sympy.Integer(0)
    for size, i in zip(dims, index, strict=True):
        offset = offset * size + i
    return sympy.expand(offset)


def loop_var(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)
