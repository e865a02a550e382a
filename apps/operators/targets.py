"""What each target's tensors can hold; a case needing anything else is unsupported there."""

from __future__ import annotations

CPU_DTYPES = frozenset({"float32", "float64", "int32", "int64", "uint8", "bool"})
# The GPU targets hold every dtype a spec can name (kope_cuda.h gives the struct codes).
GPU_DTYPES = CPU_DTYPES | {"float16", "bfloat16", "int8", "int16"}

TARGET_DTYPES: dict[str, frozenset[str]] = {
    "cpu-c": CPU_DTYPES,
    "triton": GPU_DTYPES,
    "cuda": GPU_DTYPES,
}


def unsupported_targets(dtypes: set[str]) -> list[str]:
    return sorted(t for t, supported in TARGET_DTYPES.items() if not dtypes <= supported)
