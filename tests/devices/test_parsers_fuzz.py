"""Bad input to the parsers of tool output: gcc and nvcc diagnostics, cachegrind files,
sanitizer reports, KOPE_DUMP files and ncu's CSV. Whatever the tools (or a kernel writing to
stderr) print, each parser returns its normal result or raises its own DiagnosticError.

Pure functions: no database, no compiler. The regression inputs at the top are the ones that
crashed before the parsers were fixed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.devices.compile_errors import CompilerMessage, parse_compiler_output
from apps.devices.cpu_c.diagnostics import (
    CachegrindData,
    DiagnosticError,
    parse_cachegrind,
    parse_sanitizer_reports,
    read_dumps,
    summarize_cachegrind,
)
from apps.devices.gpu.cuda_build import parse_nvcc_output
from apps.devices.gpu.evaluator import parse_ncu_csv

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HUGE = "9" * 5000  # past Python's 4300-digit limit of int(str)

GCC_OUTPUT = """kernel.c: In function 'kope_kernel':
kernel.c:12:5: error: expected ';' before '}' token
   12 |     x = 1
      |          ^
kernel.c:3:10: fatal error: missing.h: No such file or directory
/tmp/work/kernel.c:7:1: warning: unused variable 'y' [-Wunused-variable]
"""
NVCC_OUTPUT = """kernel.cu(12): error: identifier "x" is undefined
      x = 1;
      ^

kernel.cu(3): warning #177-D: variable "y" was declared but never referenced
kernel.cu:9:2: error: expected ';'
"""
SANITIZER_OUTPUT = """==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020
READ of size 4 at 0x6020 thread T0
    #0 0x55d in kope_kernel /tmp/w/kernel.c:14:9
    #1 0x55e in main (/tmp/w/driver+0x1234)
0x6020 is located 0 bytes to the right of 16-byte region
SUMMARY: AddressSanitizer: heap-buffer-overflow /tmp/w/kernel.c:14:9 in kope_kernel
kernel.c:20:13: runtime error: signed integer overflow: 2147483647 + 1 cannot be represented
    #0 0x1 in kope_kernel kernel.c:20
"""
CACHEGRIND_OUTPUT = """desc: I1 cache: 32768 B, 64 B, 8-way associative
cmd: ./driver case.bin outputs.bin 1
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
fl=/tmp/w/kernel.c
fn=kope_kernel
10 100 1 1 40 4 1 20 2 1
11 50
fl=/usr/lib/libc.so
fn=memcpy
0 300 0 0 100 10 0 100 10 0
summary: 450 1 1 140 14 1 120 12 1
"""

# Text that looks like tool output more often than uniform noise does: real lines, cut and
# spliced, with digits, colons, parentheses, NUL bytes and non-ASCII mixed in.
TOKENS = st.sampled_from(["kernel.c", "kernel.cu", ":", "(", ")", " ", "\n", "0", "12", HUGE,
                          "-1", "error", "fatal error", "warning", "note", "runtime error",
                          "==1==ERROR: AddressSanitizer:", "SUMMARY: AddressSanitizer:", "#0",
                          "0x1f in", "events:", "summary:", "fl=", "fn=", "Ir", "\x00", "²",
                          "\u0661\u0662", "\ufeff", "é", "^", '"', ",", "\t"])  # fmt: skip
NOISY_TEXT = st.one_of(
    st.text(max_size=400),
    st.lists(TOKENS, max_size=60).map("".join),
)


def spliced(real: str) -> st.SearchStrategy[str]:
    """A real output cut at a random point, with noise put in the middle of a line."""
    return st.tuples(st.integers(0, len(real)), NOISY_TEXT, st.integers(0, len(real))).map(
        lambda t: real[: t[0]] + t[1] + real[t[2] :]
    )


@pytest.mark.parametrize(
    "output",
    [f"kernel.c:{HUGE}:1: error: x", f"kernel.c:1:{HUGE}: error: x", "kernel.c:\u0661:2: error: x"],
)
def test_a_compiler_line_with_an_absurd_line_number_is_not_a_diagnostic(output: str) -> None:
    assert parse_compiler_output(output, "int x;\n") == []


def test_nvcc_and_sanitizer_lines_with_absurd_numbers_are_skipped() -> None:
    assert parse_nvcc_output(f"kernel.cu({HUGE}): error: x", "int x;\n") == []
    assert parse_sanitizer_reports(f"kernel.c:{HUGE}:1: runtime error: overflow") == []
    report = parse_sanitizer_reports(
        f"==1==ERROR: AddressSanitizer: SEGV\n    #0 0x1 in f kernel.c:{HUGE}\n"
    )[0]
    assert report["frames"][0]["line"] is None


def test_an_asan_header_without_a_description_is_reported_as_unknown() -> None:
    [report] = parse_sanitizer_reports("==1==ERROR: AddressSanitizer: ")
    assert report["kind"] == "asan" and report["summary"] == "unknown"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("events: Ir\n²0 5\n", "line 2: counts must be whole numbers"),
        ("events: Ir\nfn=f\n1 five\n", "line 3: counts must be whole numbers"),
        ("events: Ir\nsummary: 1e3\n", "line 2: counts must be whole numbers"),
        ("events: Ir\nfn=f\n1 5\nevents: Ir Dr\n1 5 6\n", "line 4: events changed mid-file"),
        ("fl=kernel.c\nfn=f\n1 5\n", "line 3: counts before any event names"),
        (f"events: Ir\n1 {HUGE}\n", "line 2: counts must be whole numbers"),
    ],
)
def test_a_malformed_cachegrind_file_is_a_diagnostic_error_naming_the_line(
    text: str, complaint: str
) -> None:
    with pytest.raises(DiagnosticError, match=complaint):
        parse_cachegrind(text)


def test_the_real_cachegrind_output_still_parses() -> None:
    data = parse_cachegrind(CACHEGRIND_OUTPUT)
    assert data.costs[("/tmp/w/kernel.c", "kope_kernel")][11] == [50, 0, 0, 0, 0, 0, 0, 0, 0]
    profile = summarize_cachegrind(
        data, kernel_path=Path("/tmp/w/kernel.c"), kernel_source="\n" * 9 + "a;\nb;\n"
    )
    assert profile["totals"]["Ir"] == 450
    assert [row["line"] for row in profile["lines"]] == [10, 11]


@FUZZ
@given(st.one_of(NOISY_TEXT, spliced(GCC_OUTPUT)), st.text(max_size=200))
def test_compiler_output_parses_to_messages_whatever_it_holds(output: str, source: str) -> None:
    messages = parse_compiler_output(output, source)
    assert all(isinstance(m, CompilerMessage) and m.line >= 0 for m in messages)


@FUZZ
@given(st.one_of(NOISY_TEXT, spliced(NVCC_OUTPUT)), st.text(max_size=200))
def test_nvcc_output_parses_to_messages_whatever_it_holds(output: str, source: str) -> None:
    assert all(isinstance(m, CompilerMessage) for m in parse_nvcc_output(output, source))


@FUZZ
@given(st.one_of(NOISY_TEXT, spliced(SANITIZER_OUTPUT)))
def test_sanitizer_output_parses_to_reports_whatever_it_holds(stderr: str) -> None:
    for report in parse_sanitizer_reports(stderr):
        assert report["kind"] in ("asan", "ubsan") and isinstance(report["summary"], str)
        assert len(report["frames"]) <= 10


@FUZZ
@given(st.one_of(NOISY_TEXT, spliced(CACHEGRIND_OUTPUT)), st.text(max_size=100))
def test_a_cachegrind_file_is_summarized_or_refused_with_a_diagnostic_error(
    text: str, kernel_source: str
) -> None:
    try:
        data = parse_cachegrind(text)
    except DiagnosticError as error:
        assert error.message.startswith("cachegrind.out line ")
        return
    assert isinstance(data, CachegrindData)
    profile = summarize_cachegrind(
        data, kernel_path=Path("/tmp/w/kernel.c"), kernel_source=kernel_source
    )
    assert set(profile["totals"]) == set(data.events)


def dump_record(name: bytes, name_len: int, dtype: int, count: int, stored: int, tail: bytes
                ) -> bytes:  # fmt: skip
    return b"KDMP" + struct.pack("<i", name_len) + name + struct.pack("<iqq", dtype, count,
                                                                      stored) + tail  # fmt: skip


RECORDS = st.builds(
    dump_record,
    st.binary(max_size=12),
    st.integers(-(2**31), 2**31 - 1) | st.integers(0, 16),
    st.integers(-3, 12),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 40),
    st.binary(max_size=80),
)


@FUZZ
@given(st.lists(RECORDS | st.binary(max_size=30), max_size=5).map(b"".join))
def test_a_dump_file_reads_as_dumps_whatever_its_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "dumps.bin"
    path.write_bytes(data)
    for dump in read_dumps(path):
        assert len(dump["values"]) <= 64 and isinstance(dump["name"], str)


@FUZZ
@given(
    st.one_of(
        NOISY_TEXT,
        st.lists(st.lists(st.text(max_size=8), max_size=5), max_size=5).map(
            lambda rows: "\n".join(",".join(f'"{c}"' for c in r) for r in rows)
        ),
    )
)
def test_an_ncu_csv_parses_to_rows_of_text_whatever_it_holds(text: str) -> None:
    header = '"Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
    for rows in (parse_ncu_csv(text), parse_ncu_csv(header + text)):
        assert all(isinstance(value, str) for row in rows for value in row.values())
