"""One test case as a binary file that the C driver (driver.c) reads, and the outputs it writes.

Case file, little-endian:

    b"KOPECASE", int32 version (1), int32 n_inputs, int32 n_outputs, int32 n_attrs
    per input:  int32 dtype code, int32 ndim, int64 shape[ndim], C-contiguous data bytes
    per output: int32 dtype code, int32 ndim, int64 shape[ndim]
    float64 attrs[n_attrs]

Dtype codes are kope_kernel.h's: float32 0, float64 1, int32 2, int64 3, uint8 4, bool 5 (one
byte). The outputs file is the output tensors' bytes concatenated in order.

No Django here: this runs in worker helpers and sandboxed children.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

MAGIC = b"KOPECASE"
VERSION = 1
DTYPE_CODES: dict[str, int] = {
    "float32": 0,
    "float64": 1,
    "int32": 2,
    "int64": 3,
    "uint8": 4,
    "bool": 5,
}
DTYPE_NAMES: dict[int, str] = {code: name for name, code in DTYPE_CODES.items()}

OutputSpec = tuple[str, list[int]]


def dtype_code(name: str) -> int:
    if name not in DTYPE_CODES:
        raise ValueError(f"unsupported dtype {name!r}; cpu-c kernels take {sorted(DTYPE_CODES)}")
    return DTYPE_CODES[name]


def little_endian_dtype(name: str) -> np.dtype[np.generic]:
    dtype_code(name)
    return np.dtype(name).newbyteorder("<")


def write_case_file(
    path: Path,
    inputs: list[np.ndarray],
    outputs: list[OutputSpec],
    attrs: list[float],
) -> None:
    parts = [MAGIC, struct.pack("<4i", VERSION, len(inputs), len(outputs), len(attrs))]
    for array in inputs:
        parts.append(_tensor_header(array.dtype.name, list(array.shape)))
        parts.append(_contiguous_bytes(array))
    for dtype_name, shape in outputs:
        parts.append(_tensor_header(dtype_name, shape))
    parts.append(struct.pack(f"<{len(attrs)}d", *attrs))
    path.write_bytes(b"".join(parts))


def read_outputs(path: Path, outputs: list[OutputSpec]) -> list[np.ndarray]:
    data = path.read_bytes()
    expected = sum(_nbytes(dtype_name, shape) for dtype_name, shape in outputs)
    if len(data) != expected:
        raise ValueError(f"{path} holds {len(data)} bytes; the outputs need {expected}")
    arrays = []
    offset = 0
    for dtype_name, shape in outputs:
        dtype = little_endian_dtype(dtype_name)
        count = int(np.prod(shape, dtype=np.int64))
        flat = np.frombuffer(data, dtype, count=count, offset=offset)
        arrays.append(flat.reshape(shape).astype(dtype_name))
        offset += count * dtype.itemsize
    return arrays


def _tensor_header(dtype_name: str, shape: list[int]) -> bytes:
    if any(dim < 0 for dim in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return struct.pack(f"<2i{len(shape)}q", dtype_code(dtype_name), len(shape), *shape)


def _contiguous_bytes(array: np.ndarray) -> bytes:
    little = np.ascontiguousarray(array, dtype=little_endian_dtype(array.dtype.name))
    return little.tobytes()


def _nbytes(dtype_name: str, shape: list[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) * little_endian_dtype(dtype_name).itemsize
