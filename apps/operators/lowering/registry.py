"""Which function lowers which ATen op. The per-family modules register themselves here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from apps.operators.lowering.builder import Kernel

Handler = Callable[[Kernel, torch.fx.Node], None]
HANDLERS: dict[Any, Handler] = {}


def lowers(*ops: Any) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for op in ops:
            HANDLERS[op] = handler
        return handler

    return register


def lowers_each(ops: dict[Any, Any], make: Callable[[Any], Handler]) -> None:
    """Registers `make(spec)` for every op of a table (op -> spec)."""
    for op, spec in ops.items():
        HANDLERS[op] = make(spec)
