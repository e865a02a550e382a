"""What this host offers the GPU targets: a CUDA device, nvcc, Nsight Compute.

The device is probed once per process in a child, so the worker itself never initialises
CUDA (a forked pool child of a process holding a CUDA context cannot use it).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

CUDA_BIN_DIRS = ("/usr/local/cuda/bin", "/opt/cuda/bin")
PROBE = """
import json, torch
if not torch.cuda.is_available():
    print(json.dumps({"reason": "torch " + torch.__version__ + " sees no CUDA device"
                      + ("" if torch.version.cuda else " (a CPU-only build)")}))
else:
    p = torch.cuda.get_device_properties(0)
    print(json.dumps({"name": p.name, "l2_bytes": int(getattr(p, "L2_cache_size", 0)),
                      "capability": f"{p.major}.{p.minor}", "memory_gb": p.total_memory / 2**30,
                      "cuda": torch.version.cuda}))
"""


@dataclass(frozen=True)
class CudaDevice:
    name: str
    l2_bytes: int
    capability: str
    memory_gb: float
    cuda: str


@dataclass(frozen=True)
class Availability:
    ok: bool
    detail: str  # what is there, or why the target cannot run here


@functools.cache
def cuda_device() -> CudaDevice | None:
    return probe()[0]


@functools.cache
def probe() -> tuple[CudaDevice | None, str]:
    """(the first CUDA device, "") or (None, why there is none)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None, "the CUDA probe failed to run"
    if "reason" in answer:
        return None, str(answer["reason"])
    return CudaDevice(**answer), ""


def no_device_reason() -> str:
    return probe()[1]


def tool_path(name: str) -> str | None:
    """A CUDA toolkit program on PATH or in the usual toolkit folders."""
    return shutil.which(name) or next(
        (found for folder in CUDA_BIN_DIRS if (found := shutil.which(name, path=folder))), None
    )


def triton_version() -> str | None:
    try:
        return version("triton")
    except PackageNotFoundError:
        return None


def triton_availability() -> Availability:
    installed = triton_version()
    if installed is None:
        return Availability(False, "triton is not installed")
    device = cuda_device()
    if device is None:
        return Availability(
            True,
            f"triton {installed} in its interpreter on the CPU: correctness of small cases, "
            f"no timing ({no_device_reason()})",
        )
    return Availability(True, f"triton {installed} on {device.name}")


def cuda_availability() -> Availability:
    nvcc = tool_path("nvcc")
    if nvcc is None:
        return Availability(False, "nvcc is not installed on this worker (not on PATH, "
                            f"nor in {', '.join(CUDA_BIN_DIRS)})")  # fmt: skip
    device = cuda_device()
    if device is None:
        return Availability(False, f"no CUDA device on this worker: {no_device_reason()}")
    return Availability(True, f"{nvcc} on {device.name}")
