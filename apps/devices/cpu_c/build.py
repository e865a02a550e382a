"""Compile a cpu-c kernel into a shared object, cached by source, flags and compiler."""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings

HEADER_DIR = Path(__file__).resolve().parent
BASE_FLAGS = ["-std=c11", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared"]


class CompileError(RuntimeError):
    def __init__(self, output: str) -> None:
        super().__init__(output)
        self.output = output


@functools.cache
def compiler_version() -> str:
    return subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout


def cache_key(source: str, flags: list[str]) -> str:
    header = (HEADER_DIR / "kope_kernel.h").read_text()
    material = "\0".join([source, header, *flags, compiler_version()])
    return hashlib.sha256(material.encode()).hexdigest()


def build_shared_object(source: str, flags: list[str] | None = None) -> Path:
    flags = BASE_FLAGS + list(flags or [])
    target = Path(settings.KOPE_BUILD_CACHE_DIR) / f"{cache_key(source, flags)}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kope-build-") as workdir:
        kernel = Path(workdir) / "kernel.c"
        kernel.write_text(source)
        built = Path(workdir) / "kernel.so"
        result = subprocess.run(
            ["gcc", *flags, f"-I{HEADER_DIR}", str(kernel), "-o", str(built), "-lm"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=workdir,
        )
        if result.returncode != 0:
            raise CompileError(result.stderr)
        # Move into place atomically so a concurrent reader never sees half a file.
        partial = target.with_suffix(".partial")
        shutil.copyfile(built, partial)
        partial.replace(target)
    return target
