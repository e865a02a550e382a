"""On-request diagnostics of a cpu-c kernel that need it as a plain C program: a cachegrind
profile and an AddressSanitizer + UBSan run with buffer dumps.

Both compile the kernel together with driver.c, which reads one test case written by
casefile.write_case_file and calls kope_kernel on it. Each runs in a work dir of its own (the
sandbox user's, removed afterwards): kernel.c, the driver binary, its outputs, cachegrind.out
and dumps.bin. gcc, valgrind and the debug build run confined, each under its step's policy
(apps/sandbox/policies.py): no worker environment, no network, only the files it needs; what
they leave is read back through a descriptor taken before they ran, never through a link.

No Django here.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import statistics
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from apps.devices.cpu_c.casefile import DTYPE_NAMES
from apps.devices.cpu_c.gcc import BASE_FLAGS, GccTimedOut, compiler_name, gcc
from apps.sandbox.jail import Limits
from apps.sandbox.policies import (
    POLICIES,
    Finished,
    SandboxUnavailable,
    Step,
    read_left_behind,
    run,
    valgrind_launcher,
    workdir,
)

DRIVER_SOURCE = Path(__file__).resolve().parent / "driver.c"
KERNEL_FILE = "kernel.c"
CASE_FILE = "case.bin"
# What valgrind cannot run is left out of the timed build's flags; -g for line numbers.
NOT_FOR_VALGRIND = ("-march=native", "-mavx512", "-mprefer-vector-width=512", "-fPIC", "-shared")
PROFILE_ISA = "-march=x86-64-v3"
DEBUG_FLAGS = [
    "-std=c11",
    "-O1",
    "-g",
    "-march=x86-64-v3",
    "-fopenmp",
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=undefined",
    "-DKOPE_DEBUG_DUMPS",
]
ASAN_OPTIONS = "detect_leaks=0:abort_on_error=0:halt_on_error=1:allocator_may_return_null=1"
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1"
TOP_FUNCTIONS = 50
MAX_FRAMES = 10
DUMP_PREVIEW = 64
STDERR_TAIL = 4000
OUTPUT_READ_LIMIT = 256 * 2**20  # cachegrind.out, dumps.bin: the file-size limit bounds them too
ASAN_ADDRESS_SPACE_FAILURES = (
    "ReserveShadowMemoryRange failed",
    "Perhaps you're using ulimit -v",
    "AddressSanitizer failed to allocate",
    "ERROR: Failed to mmap",
)


class DiagnosticError(RuntimeError):
    """The diagnostic could not run: the kernel did not build, or the tool failed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ---------------------------------------------------------------------------------------------
# Building and running the driver, confined (apps/sandbox/policies.py: compile, profile, debug)


def profile_flags(timed_flags: list[str]) -> list[str]:
    """The flags the candidate was timed with, less what valgrind cannot run (AVX-512: the
    native ISA is replaced by x86-64-v3), as an executable with line numbers."""
    kept = [f for f in timed_flags if not f.startswith(NOT_FOR_VALGRIND)]
    return [*kept, PROFILE_ISA, "-g"]


def build_driver(kernel_source: str, folder: Path, flags: list[str], timeout_s: float) -> str:
    """Compile the kernel with driver.c into `folder`/driver; its name there."""
    sources = {KERNEL_FILE: kernel_source, DRIVER_SOURCE.name: DRIVER_SOURCE.read_text()}
    arguments = [*flags, "-I.", KERNEL_FILE, DRIVER_SOURCE.name, "-o", "driver", "-lm"]
    try:
        built = gcc(folder, sources, arguments, timeout_s)
    except GccTimedOut as error:
        raise DiagnosticError(str(error)) from None
    if built.returncode != 0:
        raise DiagnosticError(f"the kernel does not compile:\n{built.output}")
    return "./driver"


@contextlib.contextmanager
def diagnostic_folder(prefix: str, case_file: Path, parent: Path | None) -> Iterator[Folder]:
    """A work dir of the sandbox user's holding the case, and a descriptor of it taken before
    anything runs there: what is read back afterwards is read through it (read_left_behind)."""
    with workdir(prefix, parent) as folder:
        shutil.copyfile(case_file, folder / CASE_FILE)
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield Folder(folder, descriptor)
        finally:
            os.close(descriptor)


@dataclass(frozen=True)
class Folder:
    path: Path
    fd: int

    def read(self, name: str) -> bytes | None:
        return read_left_behind(self.fd, name, OUTPUT_READ_LIMIT)


def run_confined(step: Step, folder: Folder, command: list[str], env: dict[str, str],
                 timeout_s: float, limits: Limits) -> Finished:  # fmt: skip
    """Run in the folder; a run past `timeout_s` is killed, its whole group with it."""
    try:
        finished = run(step, command, workdir=folder.path, timeout_s=timeout_s, limits=limits,
                       env=env)  # fmt: skip
    except SandboxUnavailable as error:
        raise DiagnosticError(str(error)) from None
    if finished.timed_out:
        raise DiagnosticError(f"{Path(command[0]).name} timed out after {timeout_s:g} s")
    return finished


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def last_lines(text: str, count: int = 20) -> str:
    return "\n".join(text.rstrip().splitlines()[-count:])


# ---------------------------------------------------------------------------------------------
# Cachegrind profile


def profile_kernel(
    kernel_source: str,
    case_file: Path,
    *,
    timed_flags: list[str] = BASE_FLAGS,
    timeout_s: float = 120,
    limits: Limits | None = None,
    repeats: int = 1,
    parent: Path | None = None,
) -> dict[str, Any]:
    """Build with profile_flags(timed_flags) and run under cachegrind, single-threaded
    (OMP_NUM_THREADS=1: cachegrind simulates one cache hierarchy and runs threads one at a
    time anyway), in a work dir of its own under `parent`.

    Returns {"tool", "events", "totals", "functions", "lines", "derived", "build", "run"}.
    "functions": kernel.c functions by Ir, descending (at most 50; code inlined into them from
    headers counts as theirs), then one "other" row with "aggregated_functions": how many
    functions it sums (the driver, libc, the loader, ...). "lines": kernel.c lines with
    nonzero Ir, by line number, with their source text. "derived": d1_miss_rate is
    (D1mr+D1mw)/(Dr+Dw), ll_miss_rate is (DLmr+DLmw)/(Dr+Dw), both for the whole program and,
    with a kernel_ prefix, for the kernel.c functions only; None where nothing was counted.
    "build": the flags, the compiler, and how they differ from the timed build's.
    """
    flags = profile_flags(timed_flags)
    with diagnostic_folder("kope-profile-", case_file, parent) as folder:
        driver = build_driver(kernel_source, folder.path, flags, timeout_s)
        command = [valgrind_launcher(), "--tool=cachegrind", "--cache-sim=yes",
                   "--cachegrind-out-file=cachegrind.out", driver, CASE_FILE, "outputs.bin",
                   str(repeats)]  # fmt: skip
        env = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive",
               "LD_LIBRARY_PATH": "/usr/lib/debug"}  # fmt: skip
        run = run_confined(Step.PROFILE, folder, command, env, timeout_s,
                           limits or POLICIES[Step.PROFILE].default_limits)  # fmt: skip
        output = folder.read("cachegrind.out")
        if run.returncode != 0 or output is None:
            raise DiagnosticError(
                f"valgrind {describe_exit(run.returncode)}:\n{last_lines(run.stderr)}"
            )
        profile = summarize_cachegrind(
            parse_cachegrind(output.decode(errors="replace")),
            kernel_path=folder.path / KERNEL_FILE,
            kernel_source=kernel_source,
        )
    profile["build"] = {"flags": flags, "compiler": compiler_name(),
                        "timed_flags": list(timed_flags),
                        "differs": profile_build_difference(timed_flags, flags)}  # fmt: skip
    profile["run"] = {"repeats": repeats, "omp_num_threads": 1, "wall_s": None}
    return profile


def profile_build_difference(timed_flags: list[str], flags: list[str]) -> str:
    """What a reader should know about the profiled binary, next to the timed one."""
    dropped = [f for f in timed_flags if f not in flags and f not in ("-fPIC", "-shared")]
    parts = [f"without {' '.join(dropped)}"] if dropped else []
    parts += [f"with {PROFILE_ISA} (valgrind cannot run AVX-512)", "-g", "1 thread"]
    return "as timed, " + ", ".join(parts)


@dataclass
class CachegrindData:
    events: list[str] = field(default_factory=list)
    # (file, function) -> line -> one count per event
    costs: dict[tuple[str, str], dict[int, list[int]]] = field(default_factory=dict)
    summary: list[int] | None = None


def parse_cachegrind(text: str) -> CachegrindData:
    """Read cachegrind's output file: `events:`, `fl=`/`fn=` context lines, rows of
    `line count...` (missing trailing counts are zero), and `summary:`.

    A file that does not follow that format raises DiagnosticError naming the line."""
    data = CachegrindData()
    current_file, current_function = "???", "???"
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("events:"):
            if data.costs:
                raise DiagnosticError(f"cachegrind.out line {number}: events changed mid-file")
            data.events = line.split(":", 1)[1].split()
        elif line.startswith(("fl=", "fi=", "fe=")):
            current_file = line[3:]
        elif line.startswith("fn="):
            current_function = line[3:]
        elif line.startswith("summary:"):
            fields = line.split(":", 1)[1].split()
            data.summary = _padded(_counts(fields, number), len(data.events))
        elif line[:1].isdigit():
            _add_cost_row(data, (current_file, current_function), line, number)
    return data


def _add_cost_row(data: CachegrindData, where: tuple[str, str], line: str, number: int) -> None:
    if not data.events:
        raise DiagnosticError(f"cachegrind.out line {number}: counts before any event names")
    source_line, *counts = _counts(line.split(), number)
    rows = data.costs.setdefault(where, {})
    padded = _padded(counts, len(data.events))
    rows[source_line] = _added(rows.get(source_line), padded)


def _counts(fields: list[str], number: int) -> list[int]:
    """Whole numbers in ASCII digits, as cachegrind writes them."""
    if not all(value.isascii() and value.isdigit() and len(value) <= 30 for value in fields):
        raise DiagnosticError(f"cachegrind.out line {number}: counts must be whole numbers")
    return [int(value) for value in fields]


def _padded(counts: list[int], width: int) -> list[int]:
    return counts[:width] + [0] * (width - len(counts[:width]))


def _added(left: list[int] | None, right: list[int]) -> list[int]:
    return right if left is None else [a + b for a, b in zip(left, right, strict=True)]


def summarize_cachegrind(
    data: CachegrindData, *, kernel_path: Path, kernel_source: str
) -> dict[str, Any]:
    def is_kernel(file_name: str) -> bool:
        return _is_kernel_file(file_name, kernel_path)

    kernel_functions = {fn for file_name, fn in data.costs if is_kernel(file_name)}
    by_function = _costs_by_function(data)
    totals = data.summary or _summed(by_function.values(), len(data.events))
    kernel_totals = _summed((by_function[fn] for fn in kernel_functions), len(data.events))
    return {
        "tool": "cachegrind",
        "events": data.events,
        "totals": dict(zip(data.events, totals, strict=True)),
        "functions": _function_rows(data.events, by_function, kernel_functions),
        "lines": _kernel_line_rows(data, is_kernel, kernel_source),
        "derived": _derived(data.events, totals, kernel_totals),
    }


def _is_kernel_file(file_name: str, kernel_path: Path) -> bool:
    """Compared as text: the name comes from the tool's output, which the kernel's run could
    shape, so it is never looked up on the worker's file system."""
    path = Path(file_name)
    if path.name != KERNEL_FILE:
        return False
    ours = {os.path.normpath(kernel_path), os.path.normpath(kernel_path.resolve())}
    return not path.is_absolute() or os.path.normpath(file_name) in ours


def _costs_by_function(data: CachegrindData) -> dict[str, list[int]]:
    totals: dict[str, list[int]] = {}
    for (_, function), rows in data.costs.items():
        for counts in rows.values():
            totals[function] = _added(totals.get(function), counts)
    return totals


def _summed(rows: Iterable[list[int]], width: int) -> list[int]:
    total = [0] * width
    for counts in rows:
        total = _added(total, counts)
    return total


def _sort_event(events: list[str]) -> int:
    return events.index("Ir") if "Ir" in events else 0


def _function_rows(
    events: list[str], by_function: dict[str, list[int]], kernel_functions: set[str]
) -> list[dict[str, Any]]:
    key = _sort_event(events)
    ranked = sorted(kernel_functions, key=lambda fn: by_function[fn][key], reverse=True)
    shown = ranked[:TOP_FUNCTIONS]
    rows: list[dict[str, Any]] = [
        {"function": fn, "file": KERNEL_FILE, **dict(zip(events, by_function[fn], strict=True))}
        for fn in shown
    ]
    rest = [fn for fn in by_function if fn not in shown]
    other = _summed((by_function[fn] for fn in rest), len(events))
    rows.append(
        {
            "function": "other",
            "file": None,
            "aggregated_functions": len(rest),
            **dict(zip(events, other, strict=True)),
        }
    )
    return rows


def _kernel_line_rows(
    data: CachegrindData, is_kernel: Callable[[str], bool], kernel_source: str
) -> list[dict[str, Any]]:
    per_line: dict[int, list[int]] = {}
    for (file_name, _), rows in data.costs.items():
        if is_kernel(file_name):
            for number, counts in rows.items():
                per_line[number] = _added(per_line.get(number), counts)
    key = _sort_event(data.events)
    source_lines = kernel_source.splitlines()
    return [
        {
            "file": KERNEL_FILE,
            "line": number,
            "source": source_lines[number - 1] if 0 < number <= len(source_lines) else "",
            **dict(zip(data.events, per_line[number], strict=True)),
        }
        for number in sorted(per_line)
        if per_line[number][key] > 0
    ]


def _derived(events: list[str], totals: list[int], kernel_totals: list[int]) -> dict[str, Any]:
    whole = dict(zip(events, totals, strict=True))
    kernel = dict(zip(events, kernel_totals, strict=True))
    return {
        "instructions": whole.get("Ir"),
        "d1_miss_rate": _ratio(whole, ("D1mr", "D1mw"), ("Dr", "Dw")),
        "ll_miss_rate": _ratio(whole, ("DLmr", "DLmw"), ("Dr", "Dw")),
        "kernel_instructions": kernel.get("Ir"),
        "kernel_d1_miss_rate": _ratio(kernel, ("D1mr", "D1mw"), ("Dr", "Dw")),
        "kernel_ll_miss_rate": _ratio(kernel, ("DLmr", "DLmw"), ("Dr", "Dw")),
    }


def _ratio(
    counts: dict[str, int], numerator: tuple[str, ...], denominator: tuple[str, ...]
) -> float | None:
    if not all(event in counts for event in (*numerator, *denominator)):
        return None
    below = sum(counts[event] for event in denominator)
    return sum(counts[event] for event in numerator) / below if below else None


# ---------------------------------------------------------------------------------------------
# Chrome trace


def chrome_trace(
    profile: dict[str, Any], time_samples_ms: list[float] | None = None, *, name: str = "candidate"
) -> dict[str, Any]:
    """A Chrome Trace Event document (opens in Perfetto and chrome://tracing).

    traceEvents, in this order, all in process 1:
      - 2 metadata events ("ph": "M") naming the process after `name` and thread 1 "calls";
      - one complete event ("ph": "X") per time sample on thread 1, laid end to end from
        ts 0 (ts and dur in microseconds; args.ms is the sample);
      - one counter event ("ph": "C") at ts 0 per row of profile["functions"], named
        "cachegrind <function>", whose args are that row's event counts (Ir, D1mr, ...): each
        becomes a counter track.
    otherData holds the profile's totals, derived rates, build, functions and hot lines, and a
    summary of the time samples.
    """
    samples = list(time_samples_ms or [])
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "args": {"name": f"kope {name}"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "calls"}},
    ]
    events += _call_events(samples, name)
    events += [_counter_event(row, profile["events"]) for row in profile["functions"]]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "name": name,
            "tool": profile.get("tool"),
            "totals": profile.get("totals"),
            "derived": profile.get("derived"),
            "build": profile.get("build"),
            "functions": profile.get("functions"),
            "lines": profile.get("lines"),
            "time_samples": _sample_summary(samples),
        },
    }


def _call_events(samples: list[float], name: str) -> list[dict[str, Any]]:
    events = []
    start_us = 0.0
    for index, sample in enumerate(samples):
        duration_us = sample * 1000.0
        events.append(
            {
                "name": f"{name} call {index + 1}",
                "cat": "call",
                "ph": "X",
                "pid": 1,
                "tid": 1,
                "ts": start_us,
                "dur": duration_us,
                "args": {"ms": sample},
            }
        )
        start_us += duration_us
    return events


def _counter_event(row: dict[str, Any], event_names: list[str]) -> dict[str, Any]:
    return {
        "name": f"cachegrind {row['function']}",
        "ph": "C",
        "pid": 1,
        "ts": 0,
        "args": {event: row[event] for event in event_names},
    }


def _sample_summary(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"count": 0}
    return {
        "count": len(samples),
        "min_ms": min(samples),
        "median_ms": statistics.median(samples),
        "mean_ms": statistics.fmean(samples),
    }


# ---------------------------------------------------------------------------------------------
# AddressSanitizer + UBSan run with dumps


def debug_kernel(
    kernel_source: str,
    case_file: Path,
    *,
    timeout_s: float = 120,
    limits: Limits | None = None,
    parent: Path | None = None,
) -> dict[str, Any]:
    """Build with DEBUG_FLAGS (ASan, UBSan, KOPE_DUMP on) and run once, in a work dir of its
    own under `parent`.

    Returns {"clean", "exit_code", "kernel_returned", "reports", "dumps", "dumps_dropped",
    "stderr_tail", "build"}. exit_code is negative for a signal; kernel_returned is the kernel's
    non-zero return value, else None. Each report: {"kind": "asan"|"ubsan", "summary",
    "message", "details", "frames"}, frames in kernel.c first. Each dump: {"name", "dtype",
    "count", "stored", "values", "stats"}, see read_dumps.
    """
    with diagnostic_folder("kope-debug-", case_file, parent) as folder:
        driver = build_driver(kernel_source, folder.path, DEBUG_FLAGS, timeout_s)
        env = {"ASAN_OPTIONS": ASAN_OPTIONS, "UBSAN_OPTIONS": UBSAN_OPTIONS,
               "KOPE_DUMP_FILE": "dumps.bin"}  # fmt: skip
        run = run_confined(Step.DEBUG, folder, [driver, CASE_FILE, "outputs.bin"], env,
                           timeout_s, limits or POLICIES[Step.DEBUG].default_limits)  # fmt: skip
        dumps = folder.read("dumps.bin")
    _refuse_address_space_failure(run.stderr)
    reports = parse_sanitizer_reports(run.stderr)
    return {
        "clean": run.returncode == 0 and not reports,
        "exit_code": run.returncode,
        "kernel_returned": _kernel_return_value(run.stderr),
        "reports": reports,
        "dumps": parse_dumps(dumps) if dumps else [],
        "dumps_dropped": "KOPE_DUMP limit" in run.stderr,
        "stderr_tail": run.stderr[-STDERR_TAIL:],
        "build": {"flags": DEBUG_FLAGS, "compiler": compiler_name()},
    }


def _refuse_address_space_failure(stderr: str) -> None:
    if any(text in stderr for text in ASAN_ADDRESS_SPACE_FAILURES):
        raise DiagnosticError(
            "AddressSanitizer could not reserve its shadow memory: the run has an address-space "
            "limit (RLIMIT_AS), which ASan cannot work under; run the debug build without it.\n"
            + last_lines(stderr, 5)
        )


def _kernel_return_value(stderr: str) -> int | None:
    match = re.search(r"^driver: kope_kernel returned (-?\d+)$", stderr, re.MULTILINE)
    return int(match.group(1)) if match else None


ASAN_ERROR = re.compile(r"^==\d+==ERROR: AddressSanitizer: (?P<what>.*)$")
ASAN_SUMMARY = re.compile(r"^SUMMARY: AddressSanitizer: (?P<kind>\S+)")
UBSAN_ERROR = re.compile(
    r"^(?P<file>[^\s:]+):(?P<line>[0-9]{1,9}):(?P<col>[0-9]{1,9}): runtime error: (?P<what>.*)$"
)
FRAME = re.compile(
    r"^\s*#\d+ 0x[0-9a-fA-F]+ in (?P<function>.+?)"
    r"(?: (?P<file>[^\s()]+):(?P<line>[0-9]{1,9})(?::[0-9]+)?| \((?P<module>[^)]*)\))?$"
)
ASAN_DETAIL = re.compile(r"^(READ|WRITE) of size|is located|^==\d+==The signal is caused by")


def parse_sanitizer_reports(stderr: str) -> list[dict[str, Any]]:
    lines = stderr.splitlines()
    reports = []
    for index, line in enumerate(lines):
        if ASAN_ERROR.match(line):
            reports.append(_asan_report(lines, index))
        elif UBSAN_ERROR.match(line):
            reports.append(_ubsan_report(lines, index))
    return reports


def _asan_report(lines: list[str], start: int) -> dict[str, Any]:
    first = lines[start]
    error = ASAN_ERROR.match(first)
    assert error is not None
    summary = next(
        (m.group("kind") for line in lines[start:] if (m := ASAN_SUMMARY.match(line))),
        (error.group("what").split() or ["unknown"])[0],
    )
    return {
        "kind": "asan",
        "summary": summary,
        "message": first.split("ERROR: ", 1)[1],
        "details": _asan_details(lines, start),
        "frames": _ordered_frames(_first_stack(lines, start + 1)),
    }


def _asan_details(lines: list[str], start: int) -> list[str]:
    """The access (READ/WRITE of size n) and which region it hit, up to the report's end."""
    details = []
    for line in lines[start + 1 :]:
        if line.startswith("SUMMARY:"):
            break
        if ASAN_DETAIL.search(line):
            details.append(line.split("==", 2)[-1].strip() if line.startswith("==") else line)
    return details


def _ubsan_report(lines: list[str], start: int) -> dict[str, Any]:
    error = UBSAN_ERROR.match(lines[start])
    assert error is not None
    frames = _first_stack(lines, start + 1) or [
        {"function": None, "file": error.group("file"), "line": int(error.group("line"))}
    ]
    return {
        "kind": "ubsan",
        "summary": error.group("what"),
        "message": lines[start],
        "details": [],
        "frames": _ordered_frames(frames),
    }


def _first_stack(lines: list[str], start: int) -> list[dict[str, Any]]:
    """The frames of the first stack trace after `start`, stopping at the next report."""
    frames: list[dict[str, Any]] = []
    for line in lines[start:]:
        match = FRAME.match(line)
        if match:
            frames.append(_frame(match))
        elif frames or ASAN_ERROR.match(line) or UBSAN_ERROR.match(line):
            break
    return frames


def _frame(match: re.Match[str]) -> dict[str, Any]:
    file_name = match.group("file") or match.group("module")
    if file_name and Path(file_name).name == KERNEL_FILE:
        file_name = KERNEL_FILE
    line = match.group("line")
    return {
        "function": match.group("function"),
        "file": file_name,
        "line": int(line) if line else None,
    }


def _ordered_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    in_kernel = [frame for frame in frames if frame["file"] == KERNEL_FILE]
    elsewhere = [frame for frame in frames if frame["file"] != KERNEL_FILE]
    return (in_kernel + elsewhere)[:MAX_FRAMES]


# ---------------------------------------------------------------------------------------------
# Dumps

DUMP_MAGIC = b"KDMP"
DUMP_ITEM_SIZES = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "uint8": 1, "bool": 1}


def read_dumps(path: Path) -> list[dict[str, Any]]:
    """Parse driver.c's dump records ("KDMP", int32 name_len, name, int32 dtype, int64 count,
    int64 stored, stored elements). A truncated last record (the run was killed while writing
    it) is ignored.

    Each dump: "count" is what the kernel asked for, "stored" how many values were kept (at
    most 4096), "values" the first 64 as numbers ("nan", "inf", "-inf" as strings, so the
    result is strict JSON), "stats" min/max/mean over the stored finite values (None when
    there are none) with nan_count and inf_count.
    """
    return parse_dumps(path.read_bytes())


def parse_dumps(data: bytes) -> list[dict[str, Any]]:
    """read_dumps on the file's bytes."""
    dumps = []
    offset = 0
    while offset < len(data):
        record = _dump_record(data, offset)
        if record is None:
            break
        dump, offset = record
        dumps.append(dump)
    return dumps


def _dump_record(data: bytes, offset: int) -> tuple[dict[str, Any], int] | None:
    try:
        if data[offset : offset + 4] != DUMP_MAGIC:
            return None
        (name_len,) = struct.unpack_from("<i", data, offset + 4)
        name = data[offset + 8 : offset + 8 + name_len].decode(errors="replace")
        offset += 8 + name_len
        dtype_code, count, stored = struct.unpack_from("<iqq", data, offset)
        offset += 20
    except struct.error:
        return None
    dtype_name = DTYPE_NAMES.get(dtype_code, f"unknown({dtype_code})")
    size = stored * DUMP_ITEM_SIZES.get(dtype_name, 0)
    if offset + size > len(data):
        return None
    values = _dump_values(data[offset : offset + size], dtype_name)
    dump = {
        "name": name,
        "dtype": dtype_name,
        "count": count,
        "stored": stored,
        "values": [_json_number(value) for value in values[:DUMP_PREVIEW].tolist()],
        "stats": _dump_stats(values),
    }
    return dump, offset + size


def _dump_values(raw: bytes, dtype_name: str) -> np.ndarray:
    if dtype_name not in DUMP_ITEM_SIZES:
        return np.zeros(0)
    return np.frombuffer(raw, np.dtype(dtype_name).newbyteorder("<"))


def _json_number(value: float | int | bool) -> float | int | bool | str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _dump_stats(values: np.ndarray) -> dict[str, Any]:
    as_float = values.astype(np.float64)
    finite = as_float[np.isfinite(as_float)]
    return {
        "min": float(finite.min()) if finite.size else None,
        "max": float(finite.max()) if finite.size else None,
        "mean": float(finite.mean()) if finite.size else None,
        "nan_count": int(np.isnan(as_float).sum()),
        "inf_count": int(np.isinf(as_float).sum()),
    }
