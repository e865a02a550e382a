"""Adversarial cpu-c kernels against the full evaluator (apps/devices/evaluator/).

Each kernel in tests/devices/adversarial/ tries one way to cheat, break or escape the
pipeline; each test asserts the verdict and the evidence behind it. Most kernels target
`gemm`: its cases, the timing case included, are small in bytes, so generating, running and
judging them takes about two seconds per evaluation.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from pytest_django import DjangoDbBlocker

from apps.devices.evaluator import EvalSettings, OperatorUnderTest, evaluate_candidate
from apps.devices.services import operator_under_test
from apps.devices.verdicts import describe_verdict
from tests.factories import store_every_builtin, stored_builtin

ROOT = Path(__file__).resolve().parents[2]
KERNELS = Path(__file__).resolve().parent / "adversarial"
NAIVE_GEMM = ROOT / "apps" / "operators" / "builtin" / "gemm" / "naive.c"
TIMING_CASE = "timing"

# The gemm fixture reads the test database once. pytest-django creates it only where a
# selected test asks for it, so without this mark a run of a few tests here found no tables.
pytestmark = pytest.mark.django_db

CORRECTNESS_ONLY = EvalSettings(seeds=2, warmup=1, repeats=5, threads=1, timing=False)
TIMED = EvalSettings(seeds=2, warmup=1, repeats=5, threads=1, timing=True)


@pytest.fixture(scope="module")
def gemm(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> OperatorUnderTest:
    """gemm as the evaluator sees it: read once, then no database (its rows are rolled back)."""
    with django_db_blocker.unblock(), transaction.atomic():
        operator = operator_under_test(stored_builtin("gemm"))
        transaction.set_rollback(True)
    return operator


@pytest.fixture(scope="module")
def naive_timed(gemm: OperatorUnderTest) -> dict[str, Any]:
    """The control's verdict; the speed tests compare against it rather than time it again."""
    return evaluate(gemm, "naive", TIMED)


def kernel(name: str) -> str:
    return (KERNELS / f"{name}.c").read_text()


def evaluate(operator: OperatorUnderTest, name: str, options: EvalSettings) -> dict[str, Any]:
    source = NAIVE_GEMM.read_text() if name == "naive" else kernel(name)
    return evaluate_candidate(operator, source, options)


OWN_SYSTEM_CALLS = "makes system calls of its own"


def cases(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    return list(verdict["correct"]["cases"])


def failed(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in cases(verdict) if not c["passed"]]


def assert_rejected_for(verdict: dict[str, Any], *symbols: str) -> None:
    assert verdict["status"] == "rejected", verdict["reason"]
    assert verdict["correct"] is None  # it never ran
    for symbol in symbols:
        assert symbol in verdict["reason"]


# --- the control ---------------------------------------------------------------------------


def test_the_naive_kernel_is_correct_and_unflagged(naive_timed: dict[str, Any]) -> None:
    verdict = naive_timed

    assert verdict["status"] == "correct", verdict["reason"]
    assert verdict["flags"] == []
    assert not failed(verdict)
    assert verdict["timed"]["ok"] and verdict["timed"]["speedup"] > 0


# --- wrong answers -------------------------------------------------------------------------


def test_a_kernel_that_writes_nothing_is_caught_by_the_nan_prefill(
    gemm: OperatorUnderTest,
) -> None:
    verdict = evaluate(gemm, "unwritten_output", CORRECTNESS_ONLY)

    assert verdict["status"] == "incorrect"
    assert len(failed(verdict)) == len(cases(verdict))
    assert all("NaN" in c["error"] and "unwritten" in c["error"] for c in failed(verdict))


def test_a_kernel_that_replays_a_remembered_answer_fails_on_fresh_seeds(
    gemm: OperatorUnderTest,
) -> None:
    verdict = evaluate(gemm, "stale_answer", CORRECTNESS_ONLY)

    assert verdict["status"] == "incorrect"
    first_calls = [c for c in cases(verdict) if c["run_id"].endswith("s0")]
    replays = [c for c in cases(verdict) if c["run_id"].endswith("s1")]
    assert all(c["passed"] for c in first_calls)
    assert replays and not any(c["passed"] for c in replays)
    assert all(c["error"] == "outside the tolerance" for c in replays)


def test_a_kernel_that_zeroes_its_inputs_is_caught(gemm: OperatorUnderTest) -> None:
    verdict = evaluate(gemm, "zeroes_inputs", CORRECTNESS_ONLY)

    assert verdict["status"] == "incorrect"
    assert len(failed(verdict)) == len(cases(verdict))
    assert all("the kernel wrote its inputs" in c["error"] for c in failed(verdict))
    assert not any(c["inputs_intact"] for c in cases(verdict))


def test_a_kernel_right_only_for_the_timing_shape_fails_the_other_cases(
    gemm: OperatorUnderTest,
) -> None:
    verdict = evaluate(gemm, "timing_shape_only", CORRECTNESS_ONLY)

    assert verdict["status"] == "incorrect"
    assert {c["case_id"] for c in failed(verdict)} == {
        c["case_id"] for c in gemm.cases if not c["timing"]
    }
    assert all(c["passed"] for c in cases(verdict) if c["case_id"] == TIMING_CASE)


def test_a_kernel_reading_uninitialised_heap_memory_is_caught(gemm: OperatorUnderTest) -> None:
    verdict = evaluate(gemm, "uninitialised_scratch", CORRECTNESS_ONLY)

    assert verdict["status"] == "incorrect"
    # MALLOC_PERTURB_ fills fresh heap memory with 0x5a bytes: 1.4e127 as a double, inf as a
    # float, nothing like a rounding slip; with glibc's per-thread cache off, recycled blocks
    # are perturbed too, so no run can get lucky.
    assert len(failed(verdict)) == len(cases(verdict))
    perturbed = [c for c in failed(verdict) if c["max_abs"] == math.inf]
    assert len(perturbed) > len(cases(verdict)) // 2
    assert all(c["error"] == "outside the tolerance" for c in perturbed)


def test_an_openmp_race_is_not_passed_as_correct(gemm: OperatorUnderTest) -> None:
    verdict = evaluate(gemm, "openmp_race", EvalSettings(seeds=2, threads=2, timing=False))

    nondeterministic = any("nondeterministic" in flag for flag in verdict["flags"])
    assert verdict["status"] == "incorrect" or nondeterministic, verdict
    assert verdict["environment"]["threads"] == 2


# --- crashes, hangs, resource exhaustion ---------------------------------------------------


def test_a_segfault_is_a_crash_naming_the_signal_and_the_run(gemm: OperatorUnderTest) -> None:
    verdict = evaluate(gemm, "null_write", CORRECTNESS_ONLY)

    assert verdict["status"] == "crashed"
    assert "killed by SIGSEGV" in verdict["reason"]
    assert "in run c0s0" in verdict["reason"]
    assert all("not run" in c["error"] for c in cases(verdict))


def test_a_kernel_that_never_returns_times_out(gemm: OperatorUnderTest, settings: Any) -> None:
    settings.KOPE_EVAL_TIMEOUT_S = 5

    verdict = evaluate(gemm, "loops_forever", CORRECTNESS_ONLY)

    assert verdict["status"] == "timed_out"
    assert "time limit ran out in run c0s0" in verdict["reason"]


def test_unbounded_allocation_hits_the_memory_limit(gemm: OperatorUnderTest, settings: Any) -> None:
    settings.KOPE_EVAL_MEMORY_MB = 1024  # the limit is reached in a fraction of a second

    verdict = evaluate(gemm, "unbounded_alloc", CORRECTNESS_ONLY)

    # malloc fails under RLIMIT_AS and the kernel writes through the NULL it got back.
    assert verdict["status"] == "crashed"
    assert "SIGSEGV" in verdict["reason"] and "in run c0s0" in verdict["reason"]


def test_a_flood_on_stdout_ends_in_a_verdict(
    gemm: OperatorUnderTest, past_the_scan: list[str]
) -> None:
    verdict = evaluate(gemm, "floods_stdout", CORRECTNESS_ONLY)

    assert past_the_scan  # the static scan rejects it first; this is the layer behind

    # 8 MiB a call: RLIMIT_FSIZE on the progress log stops it after a few calls. Python ignores
    # SIGXFSZ, so the harness dies of its own failed write to stdout (status 120).
    assert verdict["status"] == "crashed"
    assert "the candidate process crashed (exit status 120)" in verdict["reason"]
    assert len(verdict["reason"]) < 1000


def test_a_garbled_result_line_is_a_crash_not_an_exception(
    gemm: OperatorUnderTest, past_the_scan: list[str]
) -> None:
    verdict = evaluate(gemm, "garbles_result", CORRECTNESS_ONLY)

    assert past_the_scan

    assert verdict["status"] == "crashed"


# --- escapes: stopped by the symbol allowlist, or by seccomp ------------------------------


@pytest.mark.parametrize(
    ("name", "symbols"),
    [
        ("calls_fork", ["fork"]),
        ("calls_syscall_fork", ["syscall"]),
        ("opens_socket", ["socket"]),
        ("writes_file", ["fopen", "fwrite"]),
        ("calls_system", ["system"]),
        ("calls_dlopen", ["dlopen"]),
    ],
)
def test_a_kernel_calling_outside_the_allowlist_is_rejected_before_it_runs(
    gemm: OperatorUnderTest, name: str, symbols: list[str]
) -> None:
    verdict = evaluate(gemm, name, CORRECTNESS_ONLY)

    assert_rejected_for(verdict, "calls functions outside the allowlist", *symbols)


@pytest.mark.parametrize("flag", ["-lcurl", "-Wl,-rpath,/tmp", "-include/etc/passwd", "-DX=1"])
def test_flags_that_link_include_or_define_are_rejected(gemm: OperatorUnderTest, flag: str) -> None:
    options = EvalSettings(timing=False, extra_flags=("-O3", flag))

    verdict = evaluate_candidate(gemm, NAIVE_GEMM.read_text(), options)

    assert_rejected_for(verdict, f"flags not allowed: {flag} (allowed:")


@pytest.fixture
def harness_sessions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The pids of the processes the evaluator starts; each leads its own session."""
    started: list[int] = []

    class RecordingPopen(subprocess.Popen[bytes]):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self.pid)

    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    yield started


def processes_in_sessions(sessions: list[int]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) in sessions:
                    found.append(int(entry.name))
            except ProcessLookupError:
                continue
    return found


def test_a_system_call_instruction_of_its_own_is_rejected_with_the_reason(
    gemm: OperatorUnderTest,
) -> None:
    verdict = evaluate(gemm, "asm_fork", CORRECTNESS_ONLY)

    assert verdict["compiled"]["ok"] and verdict["correct"] is None  # never ran
    assert verdict["status"] == "rejected"
    assert verdict["reason"].startswith(
        f"{OWN_SYSTEM_CALLS}, which a kernel may not: syscall at 0x"
    )
    assert "in kope_kernel" in verdict["reason"]


def test_a_fork_by_inline_syscall_is_refused_by_seccomp(
    gemm: OperatorUnderTest, harness_sessions: list[int], past_the_scan: list[str]
) -> None:
    verdict = evaluate(gemm, "asm_fork", CORRECTNESS_ONLY)

    assert past_the_scan and verdict["compiled"]["ok"]
    assert verdict["status"] == "incorrect"
    eperm = 1
    assert {c["error"] for c in cases(verdict)} == {f"kope_kernel returned {100 + eperm}"}
    assert harness_sessions
    assert processes_in_sessions(harness_sessions) == []


# --- compile errors ------------------------------------------------------------------------


def plain_quotes(message: str) -> str:
    """gcc quotes with typographic single quotes in a UTF-8 locale."""
    return message.replace("\u2018", "'").replace("\u2019", "'")


def test_a_compile_error_is_located_in_the_source(gemm: OperatorUnderTest) -> None:
    verdict = evaluate(gemm, "syntax_error", CORRECTNESS_ONLY)

    assert verdict["status"] == "compile_error"
    assert not verdict["compiled"]["ok"]
    first = verdict["compiled"]["errors"][0]
    # gcc notices the missing ';' at the first token of the next line.
    assert (first["file"], first["line"], first["column"]) == ("kernel.c", 9, 5)
    assert first["severity"] == "error"
    assert plain_quotes(first["message"]) == "expected ',' or ';' before 'C'"
    assert first["source_line"] == "    C[0] = 0.0f;"


# --- speed ---------------------------------------------------------------------------------


def test_a_slower_correct_kernel_times_slower_than_the_naive_one(gemm: OperatorUnderTest) -> None:
    slower = evaluate_beside_naive(gemm, "slower")

    assert slower["status"] == "correct", slower["reason"]
    assert slower["timed"]["ok"]
    assert slower["timed"]["vs_baseline"] < 0.5


def test_a_faster_correct_kernel_times_faster_than_the_naive_one(gemm: OperatorUnderTest) -> None:
    faster = evaluate_beside_naive(gemm, "faster")

    assert faster["status"] == "correct", faster["reason"]
    assert faster["timed"]["ok"] and faster["flags"] == []
    assert faster["timed"]["vs_baseline"] > 2


def test_a_kernel_remembering_answers_by_input_address_is_incorrect(
    gemm: OperatorUnderTest,
) -> None:
    memo = evaluate_beside_naive(gemm, "memo_by_pointer")

    # Each correctness run has its own buffers; the timed calls share theirs.
    assert memo["status"] == "incorrect", memo["reason"]
    assert memo["correct"]["ok"] is False and memo["timed"]["ok"] is False
    assert "speedup" in memo["timed"]  # measured, but no verdict gives it
    wrong = memo["timed"]["wrong_calls"]
    assert any(call.startswith("timed call ") for call in wrong), wrong
    assert f"the last timed call of case {memo['timed']['case_id']}" in wrong
    named = [c["error"] for c in memo["correct"]["cases"] if not c["passed"]]
    assert named == [f"wrong output on {call}" for call in wrong]
    assert "remembered between calls" in memo["reason"]


def test_a_kernel_keeping_the_answer_left_in_its_output_is_incorrect(
    gemm: OperatorUnderTest,
) -> None:
    keeper = evaluate(gemm, "keeps_remembered_output", TIMED)

    assert keeper["status"] == "incorrect", keeper["reason"]
    assert keeper["timed"]["ok"] is False
    last_call = f"the last timed call of case {keeper['timed']['case_id']}"
    assert last_call in keeper["timed"]["wrong_calls"]


def test_a_kernel_remembering_answers_by_input_contents_is_timed_doing_the_work(
    gemm: OperatorUnderTest,
) -> None:
    memo = evaluate_beside_naive(gemm, "memo_by_contents")

    assert memo["status"] == "correct", memo["reason"]
    assert memo["timed"]["ok"], memo["timed"].get("reason")  # it never hands back a wrong answer
    assert memo["timed"]["inputs_renewed"] == TIMED.repeats
    assert "5 calls each, alternated, 1 thread(s), new inputs for each" in describe_verdict(memo)
    # Every timed call sees new contents, so its memory never hits: it is the naive kernel
    # plus a hash. Were the contents the same call after call, it would copy instead of
    # multiplying, tens of times faster.
    assert memo["timed"]["vs_baseline"] < 1.5


def evaluate_beside_naive(gemm: OperatorUnderTest, name: str) -> dict[str, Any]:
    """Timed in one process with the naive kernel, call for call: a ratio that a busy host
    (the other test worker compiling, say) slows on both sides alike."""
    return evaluate_candidate(gemm, kernel(name), TIMED, baseline_source=NAIVE_GEMM.read_text())


def test_a_kernel_cannot_forge_its_own_timing(
    gemm: OperatorUnderTest, past_the_scan: list[str]
) -> None:
    forger = evaluate(gemm, "forges_timing", TIMED)

    assert past_the_scan

    assert forger["status"] == "correct"  # it is the naive kernel; only its timing is a lie
    assert forger["timed"]["ok"] is False and "speedup" not in forger["timed"]
    assert "the candidate process stopped during timing" in forger["timed"]["reason"]
    assert any(f.startswith("timing refused") for f in forger["flags"])


def test_a_kernel_cannot_answer_the_judges_timing_orders(
    gemm: OperatorUnderTest, past_the_scan: list[str]
) -> None:
    forger = evaluate(gemm, "forges_timing_reply", TIMED)

    assert past_the_scan

    assert forger["status"] == "correct"
    assert forger["timed"]["ok"] is False
    assert "a reply the harness did not send" in forger["timed"]["reason"]


# --- the benchmark command -----------------------------------------------------------------


def test_the_evaluator_benchmark_reports_finite_positive_numbers() -> None:
    store_every_builtin()
    out = StringIO()

    call_command("bench", "evaluator", "--json", "--quick", "--repeats", "2", stdout=out)

    report = json.loads(out.getvalue())
    for key in ("overhead_fraction", "compile_cache_speedup", "spread_median", "spread_p90",
                "latency_spread_median", "latency_spread_p90", "baseline_spread_median",
                "baseline_spread_p90", "medians_baseline_spread_median",
                "medians_baseline_spread_p90"):  # fmt: skip
        assert math.isfinite(report[key]), key
        assert report[key] >= 0, key
    assert report["overhead_fraction"] > 0 and report["compile_cache_speedup"] > 0
    assert report["candidates"]
