"""CUDA C++ candidates: compiled by nvcc into a shared object, called through kope_cuda.h.

nvcc reports its own (EDG front end) errors as `kernel.cu(12): error: ...`, followed by the
source line and a caret under the column; errors from the host compiler come in gcc's
format. Both are parsed into the CompilerMessage the cpu-c target gives.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from apps.devices.compile_errors import CompilerMessage, errors_only, parse_compiler_output
from apps.devices.cpu_c.build import HEADER_DIR
from apps.devices.gpu.device import CudaDevice, tool_path
from apps.sandbox.policies import Step, run, workdir

GPU_HEADER_DIR = Path(__file__).resolve().parent
SOURCE_NAME = "kernel.cu"
BASE_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo"]
COMPILE_TIMEOUT_S = 300
# nvcc (EDG): "kernel.cu(12): error: identifier "x" is undefined", "... warning #177-D: ..."
NVCC_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\s()][^()\n]*)\((?P<line>[0-9]{1,9})\): "
    r"(?P<severity>catastrophic error|error|warning|remark)(?: #[\w-]+)?: (?P<message>.*)$"
)


class CudaCompileError(RuntimeError):
    def __init__(self, output: str, messages: list[CompilerMessage]) -> None:
        super().__init__(output)
        self.output, self.messages = output, messages


@dataclass(frozen=True)
class CudaBuild:
    path: Path
    flags: list[str]
    warnings: list[CompilerMessage]


def arch_flags(device: CudaDevice | None) -> list[str]:
    if device is None:
        return []
    major, minor = device.capability.split(".")
    return [f"-arch=sm_{major}{minor}"]


def compile_cuda(source: str, device: CudaDevice | None, folder: Path) -> CudaBuild:
    """nvcc on the candidate, confined (the gpu-compile step of apps/sandbox/policies.py) in
    a work dir of its own under `folder`; the shared object is copied into `folder`."""
    nvcc = tool_path("nvcc")
    if nvcc is None:
        raise CudaCompileError("nvcc is not installed", [])
    flags = BASE_FLAGS + arch_flags(device)
    command = [nvcc, *flags, f"-I{HEADER_DIR}", f"-I{GPU_HEADER_DIR}", SOURCE_NAME, "-o",
               "kernel.so"]  # fmt: skip
    with workdir("kope-nvcc-", folder) as build_dir:
        (build_dir / SOURCE_NAME).write_text(source)
        env = {k: os.environ[k] for k in ("LD_LIBRARY_PATH",) if k in os.environ}
        done = run(Step.GPU_COMPILE, command, workdir=build_dir, timeout_s=COMPILE_TIMEOUT_S,
                   env=env)  # fmt: skip
        if done.timed_out:
            raise CudaCompileError(f"nvcc ran over {COMPILE_TIMEOUT_S} s", [])
        messages = parse_nvcc_output(done.output, source)
        if done.returncode != 0:
            errors = errors_only(messages) or [CompilerMessage(
                SOURCE_NAME, 0, 0, "error", done.output.strip()[-500:], "")]  # fmt: skip
            raise CudaCompileError(done.output, errors)
        shutil.copyfile(build_dir / "kernel.so", folder / "kernel.so")
    return CudaBuild(folder / "kernel.so", flags, [m for m in messages if m.severity == "warning"])


def parse_nvcc_output(output: str, source: str, *, source_name: str = SOURCE_NAME
                      ) -> list[CompilerMessage]:  # fmt: skip
    """nvcc's own diagnostics and the host compiler's, in the order they were printed."""
    lines = output.splitlines()
    found = []
    for index, line in enumerate(lines):
        match = NVCC_DIAGNOSTIC.match(line)
        if match:
            found.append((index, nvcc_message(match, lines[index + 1 : index + 3], source,
                                              source_name)))  # fmt: skip
        elif ": error: " in line or ": warning: " in line or ": fatal error: " in line:
            parsed = parse_compiler_output(line, source, source_name=source_name)
            found += [(index, m) for m in parsed]
    return [message for _, message in found]


def nvcc_message(match: re.Match[str], following: list[str], source: str, source_name: str
                 ) -> CompilerMessage:  # fmt: skip
    number = int(match["line"])
    source_lines = source.splitlines()
    quoted = ""
    if match["file"].endswith(source_name) and 0 < number <= len(source_lines):
        quoted = source_lines[number - 1].rstrip()
    severity = {"catastrophic error": "error", "remark": "note"}.get(
        match["severity"], match["severity"]
    )
    column = caret_column(following, quoted)
    return CompilerMessage(match["file"].rsplit("/", 1)[-1], number, column, severity,
                           match["message"].strip(), quoted)  # fmt: skip


def caret_column(following: list[str], quoted: str) -> int:
    """The 1-based column of the caret nvcc prints under the quoted line; 0 when there is none.

    nvcc reprints the source line (after its own indentation) and then `^` under the column."""
    if len(following) < 2 or not quoted.strip() or following[1].strip() != "^":
        return 0
    shown = following[0]
    start = shown.find(quoted.strip())
    if start < 0:
        return 0
    offset = start - (len(quoted) - len(quoted.lstrip()))
    return following[1].index("^") - offset + 1
