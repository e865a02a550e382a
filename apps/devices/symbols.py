"""What a compiled kernel may call: its imported symbols and libraries, against allowlists.

A kernel that calls anything else (files, sockets, `system`, `dlopen`, its own threads, the
clock), or makes system calls with instructions of its own, is rejected before it runs; the
seccomp filter in the child stops what slips past. nm and objdump run confined (the "vet" step
of apps/sandbox/policies.py): they parse what a candidate's build produced.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from apps.sandbox.policies import Step, run, workdir

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
VET_TIMEOUT_S = 60
VETTED_NAME = "object.so"
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
    return sorted({name for name, defined in dynamic_symbols(shared_object) if not defined})


def defined_symbols(shared_object: Path) -> set[str]:
    return {name for name, defined in dynamic_symbols(shared_object) if defined}


def dynamic_symbols(shared_object: Path) -> list[tuple[str, bool]]:
    """(name, defined here) for each dynamic symbol, versions (`@GLIBC_2.2.5`) cut off."""
    symbols = []
    for line in _vet(["nm", "-D"], shared_object).splitlines():
        fields = line.split()
        if len(fields) >= 2:
            symbols.append((fields[-1].split("@")[0], fields[-2] != "U"))
    return symbols


def needed_libraries(shared_object: Path) -> list[str]:
    return libraries_in(_vet(["objdump", "-p"], shared_object))


def libraries_in(listing: str) -> list[str]:
    """The NEEDED entries of `objdump -p`'s dynamic section."""
    return [line.split()[-1] for line in listing.splitlines() if line.strip().startswith("NEEDED")]


# objdump -d: "0000000000001139 <kope_kernel>:" heads a function, "    1140:\tsyscall" is one
# instruction (--no-show-raw-insn leaves the bytes out).
FUNCTION_HEAD = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]*)>:$")
SYSTEM_CALL = re.compile(r"^\s*(?P<at>[0-9a-f]+):\s+(?P<insn>syscall|sysenter|int\s+\$0x80)\b")


def system_calls_in(listing: str) -> list[str]:
    """Each system-call instruction of `objdump -d`'s listing, as "syscall at 0x1140 in f"."""
    found, function = [], "?"
    for line in listing.splitlines():
        if head := FUNCTION_HEAD.match(line):
            function = head.group("name")
        elif call := SYSTEM_CALL.match(line):
            insn = " ".join(call.group("insn").split())
            found.append(f"{insn} at 0x{call.group('at')} in {function}")
    return found


def symbol_problems(shared_object: Path, *, entry_point: str = "kope_kernel") -> list[str]:
    """Why this kernel may not run; empty when it may."""
    symbols = dynamic_symbols(shared_object)
    listing = _vet(["objdump", "-p", "-d", "--no-show-raw-insn"], shared_object)
    problems = []
    forbidden = sorted({s for s, defined in symbols if not defined and not allowed_symbol(s)})
    if forbidden:
        problems.append(f"calls functions outside the allowlist: {', '.join(forbidden)}")
    libraries = [lib for lib in libraries_in(listing) if lib not in ALLOWED_LIBRARIES]
    if libraries:
        problems.append(f"links libraries outside the allowlist: {', '.join(libraries)}")
    if entry_point not in {s for s, defined in symbols if defined}:
        problems.append(f"does not define {entry_point}()")
    calls = system_calls_in(listing)
    if calls:
        shown = "; ".join(calls[:5]) + (f"; and {len(calls) - 5} more" if len(calls) > 5 else "")
        problems.append(f"makes system calls of its own, which a kernel may not: {shown}")
    return problems


class VetError(RuntimeError):
    """nm or objdump could not read the object: the message says which and why."""


def _vet(arguments: list[str], shared_object: Path) -> str:
    """nm or objdump on the object, confined (they parse what a candidate's build produced).
    The object is copied into the step's own folder: where it lies (the build cache, a
    worker's private folder) the sandbox user may not read."""
    with workdir("kope-vet-") as folder:
        shutil.copyfile(shared_object, folder / VETTED_NAME)
        done = run(Step.VET, [*arguments, VETTED_NAME], workdir=folder, timeout_s=VET_TIMEOUT_S)
    if done.returncode != 0 or done.timed_out:
        stderr = done.stderr.strip()[-300:]
        raise VetError(f"{arguments[0]} could not read {shared_object.name}: {stderr}")
    return done.stdout
