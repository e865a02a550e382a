"""The cuda target: nvcc's messages parsed like gcc's, and a clean "unavailable" on a host
without nvcc or a CUDA device."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.devices.evaluator import EvalSettings, EvaluationError
from apps.devices.gpu.cuda_build import CudaCompileError, compile_cuda, parse_nvcc_output
from apps.devices.gpu.device import cuda_availability, cuda_device, tool_path
from apps.devices.gpu.evaluator import evaluate_cuda
from apps.devices.gpu.suite import builtin_folder, folder_under_test

SOURCE = """#include "kope_cuda.h"

__global__ void relu(const float *x, float *y, int64_t n) {
    int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : zero;
}
"""
ENTRY = """
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    int64_t n = kope_numel(&inputs[0]);
    relu<<<(unsigned)((n + 255) / 256), 256>>>((const float *)inputs[0].data,
                                               (float *)outputs[0].data, n);
    KOPE_CHECK_LAUNCH();
    return 0;
}
"""
# The error is what nvcc 13.0 printed for SOURCE (EDG front end); the warning and the
# host-compiler error (gcc format) show the other kinds of line nvcc passes on.
NVCC_OUTPUT = """kernel.cu(5): error: identifier "zero" is undefined
      if (i < n) y[i] = x[i] > 0.0f ? x[i] : zero;
                                             ^

kernel.cu(4): warning #177-D: variable "unused" was declared but never referenced
      int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
              ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

kernel.cu:9:12: error: expected ';' before '}' token
1 error detected in the compilation of "kernel.cu".
"""


def test_nvcc_errors_and_warnings_are_parsed_with_line_column_and_source() -> None:
    error, warning, host = parse_nvcc_output(NVCC_OUTPUT, SOURCE)

    assert (error.file, error.line, error.column, error.severity) == ("kernel.cu", 5, 44, "error")
    assert error.message == 'identifier "zero" is undefined'
    assert error.source_line.strip().startswith("if (i < n)")
    assert SOURCE.splitlines()[4][error.column - 1 :].startswith("zero")
    assert (warning.severity, warning.line, warning.column) == ("warning", 4, 13)
    assert warning.message.startswith('variable "unused"')
    assert (host.file, host.line, host.column, host.severity) == ("kernel.cu", 9, 12, "error")


def test_a_message_without_a_caret_has_column_zero() -> None:
    (message,) = parse_nvcc_output('kernel.cu(2): error: expected a ";"\n', SOURCE)
    assert (message.line, message.column, message.source_line) == (2, 0, "")


needs_nvcc = pytest.mark.skipif(tool_path("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture
def folder() -> Iterator[Path]:
    """Where compile_cuda makes nvcc's work dir. Not tmp_path: pytest's base temp dir is 0700
    and root's, so the sandbox user (a root worker's confined nvcc) could not enter it."""
    path = Path(tempfile.mkdtemp(prefix="kope-cuda-build-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs_nvcc
def test_nvcc_itself_reports_errors_the_parser_reads(folder: Path) -> None:
    with pytest.raises(CudaCompileError) as raised:
        compile_cuda(SOURCE, None, folder)

    (error,) = raised.value.messages
    assert (error.file, error.line, error.column) == ("kernel.cu", 5, 44)
    assert error.message == 'identifier "zero" is undefined'


@needs_nvcc
def test_a_valid_kernel_compiles_to_a_shared_object_exporting_kope_kernel(folder: Path) -> None:
    build = compile_cuda(SOURCE.replace(": zero;", ": 0.0f;") + ENTRY, None, folder)

    symbols = subprocess.run(["nm", "-D", "--defined-only", str(build.path)], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    assert " T kope_kernel\n" in symbols  # C linkage, through kope_cuda.h
    assert build.path == folder / "kernel.so"
    assert [p.name for p in folder.iterdir()] == ["kernel.so"]  # nvcc's work dir is gone


@pytest.mark.skipif(cuda_device() is not None, reason="this host has a CUDA device")
def test_without_a_gpu_the_target_reports_itself_unavailable() -> None:
    available = cuda_availability()
    assert not available.ok
    assert "no CUDA device" in available.detail or "nvcc is not installed" in available.detail

    folder = builtin_folder("relu")
    with pytest.raises(EvaluationError, match="the cuda target is unavailable: "):
        evaluate_cuda(folder_under_test(folder), SOURCE, EvalSettings(seeds=1))
