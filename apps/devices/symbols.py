"""What a compiled kernel may call: its imported symbols and libraries, against allowlists.

A kernel that calls anything else (files, sockets, `system`, `dlopen`, its own threads, the
clock) is rejected before it runs; the seccomp filter in the child stops what slips past.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

MATH = {
    f"{name}{suffix}"
    for name in (
        "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh",
        "acosh", "atanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "sqrt",
        "cbrt", "hypot", "erf", "erfc", "tgamma", "lgamma", "ceil", "floor", "trunc", "round",
        "lround", "llround", "rint", "lrint", "llrint", "nearbyint", "fmod", "remainder", "fabs",
        "fmax", "fmin", "fma", "fdim", "copysign", "frexp", "ldexp", "modf", "scalbn", "ilogb",
        "logb", "nextafter", "sincos",
    )
    for suffix in ("", "f", "l")
}  # fmt: skip
MEMORY = {"malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign", "memalign",
          "memcpy", "memmove", "memset", "memcmp", "__memcpy_chk", "__memmove_chk",
          "__memset_chk", "__stack_chk_fail", "abort", "__assert_fail"}  # fmt: skip
# gcc's own start-up hooks, present (weak) in every shared object it builds.
TOOLCHAIN = {"__cxa_finalize", "_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable",
             "__gmon_start__"}  # fmt: skip
# glibc's vector math (libmvec), which -O3 -ffast-math may call: _ZGVdN8v_expf and the like.
VECTOR_MATH = re.compile(r"^_ZGV[bcde][NM]\d+[vlu0-9]*_[a-z0-9]+$")
OPENMP = re.compile(r"^(omp_|GOMP_)[A-Za-z0-9_]+$")
ALLOWED_LIBRARIES = {"libc.so.6", "libm.so.6", "libmvec.so.1", "libgomp.so.1", "libgcc_s.so.1"}


def allowed_symbol(name: str) -> bool:
    return (
        name in MATH
        or name in MEMORY
        or name in TOOLCHAIN
        or bool(VECTOR_MATH.match(name))
        or bool(OPENMP.match(name))
        or name.removeprefix("__").removesuffix("_finite") in MATH  # glibc's __expf_finite
    )


def imported_symbols(shared_object: Path) -> list[str]:
    out = _run(["nm", "-D", "--undefined-only", str(shared_object)])
    return sorted({line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()})


def defined_symbols(shared_object: Path) -> set[str]:
    out = _run(["nm", "-D", "--defined-only", str(shared_object)])
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def needed_libraries(shared_object: Path) -> list[str]:
    out = _run(["objdump", "-p", str(shared_object)])
    return [line.split()[-1] for line in out.splitlines() if line.strip().startswith("NEEDED")]


def symbol_problems(shared_object: Path, *, entry_point: str = "kope_kernel") -> list[str]:
    """Why this kernel may not run; empty when it may."""
    problems = []
    forbidden = [s for s in imported_symbols(shared_object) if not allowed_symbol(s)]
    if forbidden:
        problems.append(f"calls functions outside the allowlist: {', '.join(forbidden)}")
    libraries = [lib for lib in needed_libraries(shared_object) if lib not in ALLOWED_LIBRARIES]
    if libraries:
        problems.append(f"links libraries outside the allowlist: {', '.join(libraries)}")
    if entry_point not in defined_symbols(shared_object):
        problems.append(f"does not define {entry_point}()")
    return problems


def _run(args: list[str]) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout
