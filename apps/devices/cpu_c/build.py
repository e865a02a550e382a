"""Compile a cpu-c kernel into a shared object, cached by source, flags and compiler."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from apps.devices.compile_errors import CompilerMessage, errors_only, parse_compiler_output
from apps.devices.cpu_c.gcc import (
    ALLOWED_EXTRA_FLAGS,
    BASE_FLAGS,
    GccTimedOut,
    compiler_name,
    compiler_version,
    gcc,
)
from apps.sandbox.policies import Finished, workdir

HEADER_DIR = Path(__file__).resolve().parent


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
    """The shared object for this source and flags, from the cache when it is there. gcc runs
    confined (apps/devices/cpu_c/gcc.py): its errors may be shown to anyone on the team."""
    flags = checked_flags(extra_flags)
    target = Path(settings.KOPE_BUILD_CACHE_DIR) / f"{cache_key(source, flags)}.so"
    if target.exists():
        return Build(target, flags, compiler_name(), cached=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with workdir("kope-build-") as folder:
        try:
            result = gcc(folder, {"kernel.c": source}, [*flags, "-I.", "kernel.c", "-o",
                                                         "kernel.so", "-lm"])  # fmt: skip
        except GccTimedOut as error:
            raise CompileError(str(error)) from None
        messages = parse_compiler_output(result.output, source)
        if result.returncode != 0:
            raise CompileError(result.output, errors_only(messages) or [gcc_failure(result)])
        # Move into place atomically so a concurrent reader never sees half a file.
        partial = target.with_suffix(f".{folder.name}.partial")
        shutil.copyfile(folder / "kernel.so", partial)
        partial.replace(target)
    warnings = [m for m in messages if m.severity == "warning"]
    return Build(target, flags, compiler_name(), cached=False, warnings=warnings)


def gcc_failure(result: Finished) -> CompilerMessage:
    """A failure gcc did not pin to a line (killed at its memory or CPU limit, say)."""
    ending = f"killed by signal {-result.returncode}" if result.returncode < 0 else "failed"
    last = result.output.strip().splitlines()[-1:] or ["no message"]
    return CompilerMessage("kernel.c", 0, 0, "error", f"gcc {ending}: {last[0][:300]}", "")


def build_shared_object(source: str, flags: list[str] | None = None) -> Path:
    return compile_kernel(source, flags or []).path
