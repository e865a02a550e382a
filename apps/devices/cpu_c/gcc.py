"""gcc on a candidate's source, confined (apps/sandbox/policies.py, step "compile").

The source and kope_kernel.h are copied into a work dir of the sandbox user's; gcc reads
those, the system's headers and libraries, and nothing else: an #include of any other file
fails with "Permission denied", its contents unread. No Django here: the diagnostics
(driver builds) run it too.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from apps.sandbox.policies import Finished, Step, run

HEADER = Path(__file__).resolve().parent / "kope_kernel.h"
TIMEOUT_S = 120
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


@functools.cache
def compiler_version() -> str:
    """`gcc --version`: the compiler itself, no candidate input, so not confined."""
    return subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout


def compiler_name() -> str:
    return compiler_version().splitlines()[0]


class GccTimedOut(RuntimeError):
    pass


def gcc(folder: Path, sources: dict[str, str], arguments: list[str],
        timeout_s: float = TIMEOUT_S) -> Finished:  # fmt: skip
    """Write `sources` (name -> text) and the header into `folder`, then run
    `gcc ARGUMENTS` there; what it printed is in the result's output."""
    for name, text in sources.items():
        (folder / name).write_text(text)
    shutil.copyfile(HEADER, folder / HEADER.name)
    finished = run(Step.COMPILE, ["gcc", *arguments], workdir=folder, timeout_s=timeout_s)
    if finished.timed_out:
        raise GccTimedOut(f"gcc ran past {timeout_s:g} s and was stopped")
    return finished
