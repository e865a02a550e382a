"""Compile a cpu-c kernel into a shared object, cached by source, flags and compiler."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from apps.devices.compile_errors import CompilerMessage, errors_only, parse_compiler_output

HEADER_DIR = Path(__file__).resolve().parent
BASE_FLAGS = ["-std=c11", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared"]
# Extra flags a candidate may ask for: optimisation and code generation only. Nothing that
# links, includes, defines or passes options to the linker or assembler.
ALLOWED_EXTRA_FLAGS = frozenset({
    "-O2", "-O3", "-Ofast", "-funroll-loops", "-funroll-all-loops", "-ffast-math",
    "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast", "-ffp-contract=off",
    "-ftree-vectorize", "-fno-tree-vectorize", "-fopenmp-simd", "-fprefetch-loop-arrays",
    "-fomit-frame-pointer", "-fstrict-aliasing", "-fno-semantic-interposition",
    "-mavx", "-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
    "-mtune=native", "-mprefer-vector-width=256", "-mprefer-vector-width=512",
})  # fmt: skip
COMPILE_TIMEOUT_S = 120


class CompileError(RuntimeError):
    def __init__(self, output: str, messages: list[CompilerMessage] | None = None) -> None:
        super().__init__(output)
        self.output = output
        self.messages = messages or []


class FlagsRejected(ValueError):
    """Extra flags outside the allowlist; the message names them."""


@dataclass(frozen=True)
class Build:
    path: Path
    flags: list[str]
    compiler: str
    cached: bool
    warnings: list[CompilerMessage] = field(default_factory=list)


@functools.cache
def compiler_version() -> str:
    return subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout


def compiler_name() -> str:
    return compiler_version().splitlines()[0]


def checked_flags(extra: list[str] | tuple[str, ...]) -> list[str]:
    rejected = [f for f in extra if f not in ALLOWED_EXTRA_FLAGS]
    if rejected:
        allowed = " ".join(sorted(ALLOWED_EXTRA_FLAGS))
        raise FlagsRejected(f"flags not allowed: {' '.join(rejected)} (allowed: {allowed})")
    return BASE_FLAGS + list(extra)


def cache_key(source: str, flags: list[str]) -> str:
    header = (HEADER_DIR / "kope_kernel.h").read_text()
    material = "\0".join([source, header, *flags, compiler_version()])
    return hashlib.sha256(material.encode()).hexdigest()


def compile_kernel(source: str, extra_flags: list[str] | tuple[str, ...] = ()) -> Build:
    """The shared object for this source and flags, from the cache when it is there."""
    flags = checked_flags(extra_flags)
    target = Path(settings.KOPE_BUILD_CACHE_DIR) / f"{cache_key(source, flags)}.so"
    if target.exists():
        return Build(target, flags, compiler_name(), cached=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kope-build-") as workdir:
        kernel = Path(workdir) / "kernel.c"
        kernel.write_text(source)
        built = Path(workdir) / "kernel.so"
        result = subprocess.run(
            ["gcc", *flags, f"-I{HEADER_DIR}", "kernel.c", "-o", str(built), "-lm"],
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, cwd=workdir,
            env={**os.environ, "LC_ALL": "C"},  # plain quotes in messages, whatever the locale
        )  # fmt: skip
        messages = parse_compiler_output(result.stderr, source)
        if result.returncode != 0:
            raise CompileError(result.stderr, errors_only(messages))
        # Move into place atomically so a concurrent reader never sees half a file.
        partial = target.with_suffix(f".{Path(workdir).name}.partial")
        shutil.copyfile(built, partial)
        partial.replace(target)
    warnings = [m for m in messages if m.severity == "warning"]
    return Build(target, flags, compiler_name(), cached=False, warnings=warnings)


def build_shared_object(source: str, flags: list[str] | None = None) -> Path:
    return compile_kernel(source, flags or []).path
