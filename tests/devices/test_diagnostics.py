"""The plain-C diagnostics of cpu-c kernels: the case file and driver, the cachegrind profile
with its Chrome trace, and the AddressSanitizer + UBSan run with KOPE_DUMP buffer dumps.

Every test compiles small real kernels with gcc, confined as in production; the profiles run
tiny cases under valgrind. Each diagnostic makes its work dir under a folder of the test's own
(`parent`), the sandbox user's while it runs and removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from apps.devices.cpu_c import diagnostics
from apps.devices.cpu_c.casefile import read_outputs, write_case_file
from apps.devices.cpu_c.diagnostics import (
    DiagnosticError,
    Folder,
    build_driver,
    chrome_trace,
    debug_kernel,
    parse_cachegrind,
    profile_flags,
    profile_kernel,
)
from apps.devices.cpu_c.gcc import BASE_FLAGS
from apps.sandbox.jail import Limits
from apps.sandbox.policies import Finished, Step, hand_over

BUILTIN = Path(__file__).resolve().parents[2] / "apps" / "operators" / "builtin"
SIGNATURE = """#include <string.h>
#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
"""


def kernel(body: str) -> str:
    return SIGNATURE + body + "}\n"


def line_of(source: str, marker: str) -> int:
    numbers = [n for n, line in enumerate(source.splitlines(), 1) if marker in line]
    assert len(numbers) == 1, f"{marker!r} is on lines {numbers}"
    return numbers[0]


@pytest.fixture
def parent() -> Iterator[Path]:
    """Where the diagnostics make their work dirs. Not tmp_path: pytest's base temp dir is
    0700 and root's, so the sandbox user (a root worker's confined steps) could not enter it."""
    path = Path(tempfile.mkdtemp(prefix="kope-diagnostics-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def build_plain_driver(parent: Path) -> Callable[[str], Path]:
    """The kernel and driver.c built by the confined gcc, as the profile builds them, into a
    folder of the sandbox user's; the test runs the binary itself, unconfined."""

    def build(source: str) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="plain-", dir=parent))
        hand_over(folder)
        driver = build_driver(source, folder, profile_flags(BASE_FLAGS), timeout_s=60)
        return folder / driver

    return build


def run_driver(binary: Path, case: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), str(case), str(out)], capture_output=True, text=True, timeout=30
    )


def softmax_case(tmp_path: Path, rows: int = 3, cols: int = 17) -> tuple[Path, np.ndarray]:
    x = np.random.default_rng(7).standard_normal((rows, cols)).astype(np.float32)
    case = tmp_path / "softmax.case"
    write_case_file(case, [x], [("float32", [rows, cols])], [])
    return case, x


# --- The case file and the driver ----------------------------------------------------------

COPY_KERNEL = kernel("""
    if (n_inputs != n_outputs || n_attrs != 2 || attrs[0] != 1.5 || attrs[1] != -2.0) return 3;
    for (int32_t t = 0; t < n_inputs; ++t) {
        const kope_tensor *in = &inputs[t];
        kope_tensor *out = &outputs[t];
        if (in->dtype != out->dtype || in->ndim != out->ndim) return 4;
        int64_t expected_stride = 1;
        for (int32_t d = in->ndim - 1; d >= 0; --d) {
            if (out->strides[d] != expected_stride || in->shape[d] != out->shape[d]) return 5;
            expected_stride *= in->shape[d];
        }
        int64_t item = (in->dtype == KOPE_FLOAT64 || in->dtype == KOPE_INT64) ? 8
                     : (in->dtype == KOPE_UINT8 || in->dtype == KOPE_BOOL) ? 1 : 4;
        memcpy(out->data, in->data, (size_t)(kope_numel(in) * item));
    }
    return 0;
""")


# `make test` installs valgrind (as root); elsewhere its absence skips the profile tests, except
# in CI, where it must be there.
needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None and os.environ.get("CI") != "true",
    reason="valgrind is not installed",
)


def test_a_copy_kernel_gives_every_dtype_and_shape_back_through_the_driver(
    tmp_path: Path, build_plain_driver: Callable[[str], Path]
) -> None:
    rng = np.random.default_rng(1)
    inputs: list[np.ndarray] = [
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.standard_normal((2, 2, 2)),
        np.array(-7, dtype=np.int32),
        rng.integers(-(2**40), 2**40, size=5),
        np.arange(3, dtype=np.uint8),
        np.array([True, False, True, True]),
        np.asfortranarray(rng.standard_normal((3, 4)).astype(np.float32)),
    ]
    outputs = [(a.dtype.name, list(a.shape)) for a in inputs]
    case, out = tmp_path / "copy.case", tmp_path / "copy.out"
    write_case_file(case, inputs, outputs, [1.5, -2.0])

    result = run_driver(build_plain_driver(COPY_KERNEL), case, out)

    assert result.returncode == 0, result.stderr
    got = read_outputs(out, outputs)
    for given, back in zip(inputs, got, strict=True):
        assert back.dtype == given.dtype and back.shape == given.shape
        np.testing.assert_array_equal(back, given)


def test_outputs_start_as_nan_for_floats_and_zero_otherwise(
    tmp_path: Path, build_plain_driver: Callable[[str], Path]
) -> None:
    outputs = [("float32", [2, 3]), ("float64", [4]), ("int32", [3]), ("bool", [2])]
    case, out = tmp_path / "nothing.case", tmp_path / "nothing.out"
    write_case_file(case, [], outputs, [])

    result = run_driver(build_plain_driver(kernel("    return 0;\n")), case, out)

    assert result.returncode == 0, result.stderr
    f32, f64, i32, flags = read_outputs(out, outputs)
    assert np.isnan(f32).all() and np.isnan(f64).all()
    assert not i32.any() and not flags.any()


def test_the_driver_exits_2_on_a_bad_case_file_and_with_the_kernel_status(
    tmp_path: Path, build_plain_driver: Callable[[str], Path]
) -> None:
    binary = build_plain_driver(kernel("    return n_attrs == 1 ? 5 : 0;\n"))
    case, out = tmp_path / "good.case", tmp_path / "out"
    write_case_file(case, [np.zeros(4, np.float32)], [("float32", [4])], [0.0])
    whole = case.read_bytes()
    truncated, wrong_magic = tmp_path / "truncated.case", tmp_path / "magic.case"
    truncated.write_bytes(whole[:-3])
    wrong_magic.write_bytes(b"NOTACASE" + whole[8:])

    failed = run_driver(binary, case, out)
    short = run_driver(binary, truncated, out)
    alien = run_driver(binary, wrong_magic, out)

    assert failed.returncode == 5 and "kope_kernel returned 5" in failed.stderr
    assert short.returncode == 2 and "truncated" in short.stderr
    assert alien.returncode == 2 and "not a KOPECASE file" in alien.stderr


def test_the_case_file_refuses_unsupported_dtypes_and_wrong_output_sizes(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="float16"):
        write_case_file(tmp_path / "a", [np.zeros(2, np.float16)], [], [])
    with pytest.raises(ValueError, match="complex64"):
        write_case_file(tmp_path / "b", [], [("complex64", [2])], [])
    (tmp_path / "out").write_bytes(b"\0" * 12)
    with pytest.raises(ValueError, match="12 bytes"):
        read_outputs(tmp_path / "out", [("float32", [4])])


# --- Profile -------------------------------------------------------------------------------


def gemm_case(tmp_path: Path, m: int, k: int, n: int) -> Path:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    case = tmp_path / "gemm.case"
    write_case_file(case, [a, b], [("float32", [m, n])], [])
    return case


@needs_valgrind
def test_profile_of_naive_gemm_puts_the_cost_in_the_innermost_loop(
    tmp_path: Path, parent: Path
) -> None:
    m, k, n = 8, 12, 10
    source = (BUILTIN / "gemm" / "naive.c").read_text()

    profile = profile_kernel(source, gemm_case(tmp_path, m, k, n), parent=parent)

    assert profile["tool"] == "cachegrind" and profile["events"][0] == "Ir"
    assert profile["totals"]["Ir"] > 0
    hottest = sorted(profile["lines"], key=lambda row: row["Ir"], reverse=True)
    # gcc splits the inner loop's instructions between its `for` line (index arithmetic,
    # compare, branch) and its body, about evenly; the two of them lead everything else.
    assert {row["source"].strip() for row in hottest[:2]} == {
        "for (int64_t p = 0; p < k; ++p) {",
        "acc += (double)A[i * k + p] * B[p * n + j];",
    }
    body = next(row for row in profile["lines"] if "+=" in row["source"])
    assert body["Dr"] == 2 * m * n * k  # one load of A and one of B per iteration
    kernel_row, other_row = profile["functions"]
    assert (kernel_row["function"], kernel_row["file"]) == ("kope_kernel", "kernel.c")
    assert kernel_row["Ir"] == sum(row["Ir"] for row in profile["lines"])
    assert other_row["function"] == "other" and other_row["aggregated_functions"] > 10
    assert kernel_row["Ir"] + other_row["Ir"] == profile["totals"]["Ir"]
    derived = profile["derived"]
    assert 0 <= derived["d1_miss_rate"] <= 1 and 0 <= derived["ll_miss_rate"] <= 1
    assert derived["kernel_instructions"] == kernel_row["Ir"]
    assert list(parent.iterdir()) == []  # the work dir is gone

    trace = chrome_trace(profile, [1.5, 2.0, 0.5], name="gemm")
    document = json.loads(json.dumps(trace, allow_nan=False))
    calls = [e for e in document["traceEvents"] if e["ph"] == "X"]
    counters = [e for e in document["traceEvents"] if e["ph"] == "C"]
    assert len(document["traceEvents"]) == 2 + 3 + len(profile["functions"])
    assert [(e["ts"], e["dur"]) for e in calls] == [(0, 1500), (1500, 2000), (3500, 500)]
    assert counters[0]["name"] == "cachegrind kope_kernel"
    assert counters[0]["args"]["Ir"] == kernel_row["Ir"]
    assert document["displayTimeUnit"] == "ms"
    assert document["otherData"]["build"] == profile["build"]


@needs_valgrind
def test_the_profile_says_how_its_build_differs_from_the_timed_one(
    tmp_path: Path, parent: Path
) -> None:
    source = (BUILTIN / "gemm" / "naive.c").read_text()
    timed = [*BASE_FLAGS, "-mavx512f", "-funroll-loops"]

    profile = profile_kernel(source, gemm_case(tmp_path, 2, 3, 4), timed_flags=timed, parent=parent)

    build = profile["build"]
    assert build["timed_flags"] == timed
    # valgrind cannot run AVX-512 (nor -march=native on such a machine); the rest is kept
    assert build["flags"] == ["-std=c11", "-O3", "-fopenmp", "-funroll-loops",
                              "-march=x86-64-v3", "-g"]  # fmt: skip
    assert build["differs"] == (
        "as timed, without -march=native -mavx512f, "
        "with -march=x86-64-v3 (valgrind cannot run AVX-512), -g, 1 thread"
    )
    assert build["compiler"].startswith("gcc")
    assert profile["run"] == {"repeats": 1, "omp_num_threads": 1, "wall_s": None}


@needs_valgrind
def test_profile_repeats_multiply_the_kernel_cost(tmp_path: Path, parent: Path) -> None:
    source = (BUILTIN / "gemm" / "naive.c").read_text()
    case = gemm_case(tmp_path, 4, 5, 6)

    once = profile_kernel(source, case, parent=parent)
    thrice = profile_kernel(source, case, parent=parent, repeats=3)

    assert thrice["functions"][0]["Ir"] == 3 * once["functions"][0]["Ir"]
    assert thrice["run"]["repeats"] == 3


@needs_valgrind
def test_profile_reports_a_crash_and_a_timeout_as_diagnostic_errors(
    tmp_path: Path, parent: Path
) -> None:
    case, _ = softmax_case(tmp_path)
    # Through an address read at run time (17, never mapped): a constant NULL store would be
    # turned into a trap instruction by gcc.
    crash = kernel("    *(volatile int *)outputs[0].strides[0] = 1;\n    return 0;\n")
    # Tries to fork first: the profile step's filter refuses that, and anything it did start
    # would be in the driver's process group, which is killed as one.
    spin = "int fork(void);\n" + kernel(
        "    fork();\n    volatile unsigned spins = 0;\n    for (;;) ++spins;\n"
    )

    with pytest.raises(DiagnosticError, match="SIGSEGV"):
        profile_kernel(crash, case, parent=parent)
    with pytest.raises(DiagnosticError, match=r"timed out after 1\.5 s"):
        profile_kernel(spin, case, parent=parent, timeout_s=1.5)

    assert not processes_gone_within(parent, seconds=5)
    assert list(parent.iterdir()) == []


def processes_gone_within(folder: Path, *, seconds: float) -> list[str]:
    """Processes still working in `folder` after waiting: SIGKILLed ones take a moment to go."""
    deadline = time.monotonic() + seconds
    while (found := processes_working_in(folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def processes_working_in(folder: Path) -> list[str]:
    """Pids whose current directory is `folder` or below it (removed or not)."""
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if os.readlink(cwd).startswith(f"{folder}/"):
                found.append(cwd.parent.name)
        except OSError:
            continue
    return found


def test_parse_cachegrind_pads_missing_counts_and_sums_repeated_lines() -> None:
    text = (
        "events: Ir Dr Dw\n"
        "fl=/work/kernel.c\nfn=kope_kernel\n3 10 2\n4 5\n3 2\n"
        "fn=helper\n3 1 1 1\n"
        "summary: 18 3 1\n"
    )

    data = parse_cachegrind(text)

    assert data.events == ["Ir", "Dr", "Dw"]
    assert data.costs[("/work/kernel.c", "kope_kernel")] == {3: [12, 2, 0], 4: [5, 0, 0]}
    assert data.costs[("/work/kernel.c", "helper")] == {3: [1, 1, 1]}
    assert data.summary == [18, 3, 1]


# --- Debug ---------------------------------------------------------------------------------


@pytest.fixture
def debug_outputs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Where the debug run's outputs.bin is copied before its work dir is removed: the
    diagnostic reports on the run, not on what the kernel wrote."""
    kept = tmp_path / "debug-outputs.bin"
    run_confined = diagnostics.run_confined

    def run_and_keep_outputs(step: Step, folder: Folder, *args: Any) -> Finished:
        finished = run_confined(step, folder, *args)
        if step == Step.DEBUG:
            kept.write_bytes(folder.read("outputs.bin") or b"")
        return finished

    monkeypatch.setattr(diagnostics, "run_confined", run_and_keep_outputs)
    return kept


def test_debug_finds_a_heap_overflow_one_past_an_output(tmp_path: Path, parent: Path) -> None:
    case, _ = softmax_case(tmp_path)
    source = kernel("""
    float *y = (float *)outputs[0].data;
    int64_t n = kope_numel(&outputs[0]);
    for (int64_t i = 0; i <= n; ++i) y[i] = 1.0f; /* one past the end */
    return 0;
""")

    result = debug_kernel(source, case, parent=parent)

    assert not result["clean"] and result["exit_code"] != 0
    (report,) = result["reports"]
    assert report["kind"] == "asan" and report["summary"] == "heap-buffer-overflow"
    assert report["message"].startswith("AddressSanitizer: heap-buffer-overflow")
    assert "WRITE of size 4" in report["details"][0]
    assert "0 bytes to the right of 204-byte region" in report["details"][1]
    assert report["frames"][0] == {
        "function": "kope_kernel",
        "file": "kernel.c",
        "line": line_of(source, "one past the end"),
    }


def test_debug_finds_signed_integer_overflow(tmp_path: Path, parent: Path) -> None:
    case, _ = softmax_case(tmp_path)
    source = kernel("""
    int32_t big = (int32_t)inputs[0].shape[1] * 100000000;
    big *= 2; /* overflows */
    return big == 7;
""")

    result = debug_kernel(source, case, parent=parent)

    assert not result["clean"]
    (report,) = result["reports"]
    assert report["kind"] == "ubsan"
    assert report["summary"].startswith("signed integer overflow: 1700000000 * 2")
    assert report["frames"][0]["file"] == "kernel.c"
    assert report["frames"][0]["line"] == line_of(source, "overflows")


def test_debug_of_the_naive_softmax_is_clean_and_correct(
    tmp_path: Path, parent: Path, debug_outputs: Path
) -> None:
    case, x = softmax_case(tmp_path)
    source = (BUILTIN / "softmax_rows" / "naive.c").read_text()

    result = debug_kernel(source, case, parent=parent)

    assert result["clean"], result["stderr_tail"]
    assert result["exit_code"] == 0 and result["reports"] == [] and result["dumps"] == []
    (y,) = read_outputs(debug_outputs, [("float32", [3, 17])])
    expected = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, expected / expected.sum(axis=1, keepdims=True), rtol=1e-5)


def test_debug_dumps_the_softmax_input_and_plain_builds_ignore_the_dump(
    tmp_path: Path, parent: Path, build_plain_driver: Callable[[str], Path]
) -> None:
    case, x = softmax_case(tmp_path)
    naive = (BUILTIN / "softmax_rows" / "naive.c").read_text()
    anchor = "float *y = (float *)outputs[0].data;"
    source = naive.replace(
        anchor, anchor + '\n    KOPE_DUMP("softmax input", x, 51, KOPE_FLOAT32);'
    )
    assert source != naive

    result = debug_kernel(source, case, parent=parent)
    plain_dumps = tmp_path / "plain-dumps.bin"
    plain = subprocess.run(
        [str(build_plain_driver(source)), str(case), str(tmp_path / "p.out")],
        env={"KOPE_DUMP_FILE": str(plain_dumps)},
        timeout=30,
    )

    assert result["clean"], result["stderr_tail"]
    (dump,) = result["dumps"]
    assert (dump["name"], dump["dtype"], dump["count"], dump["stored"]) == (
        "softmax input",
        "float32",
        51,
        51,
    )
    assert dump["values"] == x.ravel().tolist()
    assert dump["stats"]["min"] == float(x.min()) and dump["stats"]["max"] == float(x.max())
    assert dump["stats"]["nan_count"] == 0
    assert plain.returncode == 0 and not plain_dumps.exists()


def test_a_long_dump_keeps_its_count_but_only_the_first_values(
    tmp_path: Path, parent: Path
) -> None:
    x = np.arange(5000, dtype=np.float64)
    x[1] = np.nan
    case = tmp_path / "long.case"
    write_case_file(case, [x], [], [])
    source = kernel('    KOPE_DUMP("x", inputs[0].data, 5000, KOPE_FLOAT64);\n    return 0;\n')

    result = debug_kernel(source, case, parent=parent)

    (dump,) = result["dumps"]
    assert (dump["count"], dump["stored"], len(dump["values"])) == (5000, 4096, 64)
    assert dump["values"][:3] == [0.0, "nan", 2.0]
    assert dump["stats"] == {
        "min": 0.0,
        "max": 4095.0,
        "mean": pytest.approx((sum(range(4096)) - 1) / 4095),
        "nan_count": 1,
        "inf_count": 0,
    }
    json.dumps(result, allow_nan=False)


def test_a_kernel_that_does_not_compile_raises_with_the_gcc_message(
    tmp_path: Path, parent: Path
) -> None:
    case, _ = softmax_case(tmp_path)
    source = kernel("    return undeclared_thing;\n")

    with pytest.raises(DiagnosticError) as raised:
        debug_kernel(source, case, parent=parent)

    assert "'undeclared_thing' undeclared" in raised.value.message
    assert f"kernel.c:{line_of(source, 'undeclared_thing')}:" in raised.value.message


def test_debug_under_an_address_space_limit_says_asan_cannot_run(
    tmp_path: Path, parent: Path
) -> None:
    case, _ = softmax_case(tmp_path)
    source = (BUILTIN / "softmax_rows" / "naive.c").read_text()
    four_gb = Limits(memory_mb=4096)  # RLIMIT_AS; ASan's shadow memory needs terabytes

    with pytest.raises(DiagnosticError, match="RLIMIT_AS"):
        debug_kernel(source, case, limits=four_gb, parent=parent)
