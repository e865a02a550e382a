"""What each target's tensors can hold; a case needing anything else is unsupported there."""

from __future__ import annotations

TARGET_DTYPES: dict[str, frozenset[str]] = {
    "cpu-c": frozenset({"float32", "float64", "int32", "int64", "uint8", "bool"}),
}


def unsupported_targets(dtypes: set[str]) -> list[str]:
    return sorted(t for t, supported in TARGET_DTYPES.items() if not dtypes <= supported)
