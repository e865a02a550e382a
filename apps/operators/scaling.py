"""How an importer shrinks a benchmark's GPU-scale sizes; shared by refrun (no dependencies)."""

from __future__ import annotations

SIZE_CONSTANT_MIN = 9  # module-level ints above 8 are sizes; small ones (kernel 3, stride 2) stay


def scaled_size(value: int, scale: float) -> int:
    if value < SIZE_CONSTANT_MIN:
        return value
    return max(1, int(value * scale))
