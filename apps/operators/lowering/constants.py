"""Parameters and buffers embedded in the C source as static arrays, bit-exact."""

from __future__ import annotations

import re

import torch

from apps.operators.lowering.builder import ctype
from apps.operators.lowering.errors import LoweringError

MAX_EMBEDDED_CHARS = 800_000
PER_LINE = 8


def float_literal(value: float, single: bool) -> str:
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "-INFINITY"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0"
    text = re.sub(r"\.?0+p", "p", value.hex())  # 0x1.8000000000000p+1 -> 0x1.8p+1
    return text + ("f" if single else "")


def literals(tensor: torch.Tensor) -> list[str]:
    flat = tensor.detach().contiguous().reshape(-1)
    if tensor.is_floating_point():
        single = tensor.dtype == torch.float32
        return [float_literal(v, single) for v in flat.double().tolist()]
    if tensor.dtype == torch.bool:
        return ["1" if v else "0" for v in flat.tolist()]
    return [f"INT64_C({v})" if tensor.dtype == torch.int64 else str(v) for v in flat.tolist()]


class ConstantTable:
    """The static arrays of one kernel, with a cap on how much source they take."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.chars = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        c = ctype(tensor.dtype)
        if tensor.numel() * 8 + self.chars > MAX_EMBEDDED_CHARS * 2:
            self.too_big()
        values = literals(tensor) or ["0"]
        rows = [", ".join(values[i : i + PER_LINE]) for i in range(0, len(values), PER_LINE)]
        text = f"static const {c} {name}[{len(values)}] = {{\n    " + ",\n    ".join(rows)
        text += "\n};"
        self.chars += len(text)
        if self.chars > MAX_EMBEDDED_CHARS:
            self.too_big()
        self.lines.append(text)

    def too_big(self) -> None:
        raise LoweringError(
            f"the model's parameters need over {MAX_EMBEDDED_CHARS // 1000} kB of C source "
            "to embed: too large to lower"
        )
