"""The evaluation pipeline on real kernels: the built-in suite, the stored verdict, the worker."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from apps.devices.compile_errors import parse_compiler_output
from apps.devices.evaluator import (
    EvalSettings,
    Run,
    chunk_errors,
    evaluate_candidate,
    evaluation_bytes,
    nonfinite_chunk_errors,
    paired_ratio,
    read_outcome,
    timing_summary,
)
from apps.devices.models import Evaluation
from apps.devices.services import (
    claim_attempt,
    evaluation_execute,
    evaluation_request,
    evaluation_start,
    kernel_source_store,
    operator_under_test,
)
from apps.devices.verdicts import describe_verdict
from apps.operators.builtin_suite import read_builtin_suite
from apps.sandbox.jail import sandbox_ids
from tests.factories import stored_builtin
from tests.processes import celery_worker
from tests.workbench.test_live_events import process_env

CORRECTNESS_ONLY = EvalSettings(seeds=3, timing=False)
KERNELS = Path(__file__).resolve().parent / "adversarial"
ROOT = Path(__file__).resolve().parents[2]
EVALUATIONS_AT_ONCE = max(2, min(4, os.cpu_count() or 2))


def test_every_naive_kernel_of_the_builtin_suite_passes_every_case(db: None) -> None:
    folders = read_builtin_suite()
    operators = [operator_under_test(stored_builtin(f.spec.slug)) for f in folders]
    sandbox_ids()  # looked up here, not in a child forked from this (threaded) process

    def evaluate(index: int) -> dict[str, Any]:  # no database in here: safe on a thread
        return evaluate_candidate(operators[index], folders[index].naive_source, CORRECTNESS_ONLY)

    # Each evaluation spends most of its time in its own child processes (the reference
    # runner, the confined harness), so several at a time keep several cores busy.
    with ThreadPoolExecutor(max_workers=EVALUATIONS_AT_ONCE) as pool:
        verdicts = list(pool.map(evaluate, range(len(folders))))
    failures = []
    for folder, verdict in zip(folders, verdicts, strict=True):
        cases = len(folder.spec.cases)
        timing_cases = sum(c.timing for c in folder.spec.cases)
        small = cases - timing_cases
        expected_runs = 3 * small + timing_cases + small  # one seed on the big case; repeats
        if verdict["status"] != "correct" or verdict["flags"]:
            failures.append(f"{folder.spec.slug}: {verdict['status']} {verdict['reason']} "
                            f"{verdict['flags']} {verdict.get('correct')}")  # fmt: skip
        elif verdict["correct"]["runs"] != expected_runs:
            failures.append(f"{folder.spec.slug}: {verdict['correct']['runs']} runs")
    assert not failures, "\n".join(failures)


def test_runs_larger_together_than_the_memory_limit_are_judged_one_at_a_time(
    db: None, settings: Any
) -> None:
    """Every seed of every case of a real suite's problem can add up to more than the
    harness may map; only the run being called is mapped."""
    settings.KOPE_EVAL_MEMORY_MB = 512
    stored = operator_under_test(stored_builtin("vector_add"))
    n = 4 * 2**20  # three 16 MiB arrays a run; eight cases, two seeds each: 768 MiB in all
    cases = [{"case_id": f"big{i}", "params": {"n": n + i}, "dtype": "float32", "timing": False,
              "unsupported_targets": []} for i in range(8)]  # fmt: skip
    operator = dataclasses.replace(stored, cases=cases)
    naive = (ROOT / "apps" / "operators" / "builtin" / "vector_add" / "naive.c").read_text()

    verdict = evaluate_candidate(operator, naive, EvalSettings(seeds=2, timing=False))

    assert verdict["status"] == "correct", verdict["reason"]
    assert verdict["correct"]["runs"] >= 16


def test_an_evaluation_knows_how_many_bytes_its_runs_write(db: None) -> None:
    operator = operator_under_test(stored_builtin("vector_add"))
    sizes = {c["case_id"]: c["params"]["n"] for c in operator.cases}

    assert {c["case_id"]: c["bytes"] for c in operator.cases} == {
        case_id: 3 * 4 * n
        for case_id, n in sizes.items()  # a, b and out in float32
    }
    timing = {c["case_id"] for c in operator.cases if c["timing"]}
    # three seeds and a repeat of each small case, one seed of the timing case; the judge's
    # expected outputs beside the runs' files
    runs_of = {case_id: 1 if case_id in timing else 4 for case_id in sizes}
    assert evaluation_bytes(operator, 3) == 2 * sum(runs_of[c] * 12 * n for c, n in sizes.items())


def test_compiler_errors_come_back_with_file_line_column_and_source() -> None:
    source = "int f(void) {\n    int x = 1\n    return x;\n}\n"
    output = (
        "kernel.c: In function 'f':\n"
        "kernel.c:2:14: error: expected ',' or ';' before 'return'\n"
        "    2 |     int x = 1\n"
        "/tmp/kope-build-x/kernel.c:3:5: warning: unused value\n"
    )
    first, second = parse_compiler_output(output, source)
    assert (first.file, first.line, first.column, first.severity) == ("kernel.c", 2, 14, "error")
    assert first.message == "expected ',' or ';' before 'return'"
    assert first.source_line == "    int x = 1"
    assert (second.severity, second.source_line) == ("warning", "    return x;")


def test_a_compile_error_is_a_verdict_with_the_parsed_error(db: None) -> None:
    operator = operator_under_test(stored_builtin("logsumexp_rows"))
    verdict = evaluate_candidate(
        operator, '#include "kope_kernel.h"\nint kope_kernel(', CORRECTNESS_ONLY
    )
    assert verdict["status"] == "compile_error"
    (error,) = verdict["compiled"]["errors"]
    assert error["line"] == 2 and error["source_line"] == "int kope_kernel("


def test_the_same_candidate_is_evaluated_once_unless_asked_again(db: None) -> None:
    version = stored_builtin("logsumexp_rows")
    source = next(f for f in read_builtin_suite() if f.spec.slug == "logsumexp_rows").naive_source
    first, created = evaluation_request(
        version=version, source_text=source, options=CORRECTNESS_ONLY
    )
    done = evaluation_execute(first.pk, max_attempts=2)
    done.refresh_from_db()  # the verdict as stored
    again, created_again = evaluation_request(
        version=version, source_text=source, options=CORRECTNESS_ONLY
    )
    rerun, reset = evaluation_request(version=version, source_text=source, options=CORRECTNESS_ONLY,
                                      rerun=True)  # fmt: skip

    assert created and done.status == "done" and done.verdict["status"] == "correct"
    assert (again.pk, created_again, again.verdict) == (first.pk, False, done.verdict)
    assert (rerun.pk, reset, rerun.status, rerun.verdict) == (first.pk, True, "queued", None)
    other, other_created = evaluation_request(
        version=version, source_text=source, options=EvalSettings(seeds=2, timing=False)
    )
    assert other_created and other.pk != first.pk  # other settings, other evaluation


def test_an_evaluation_whose_workers_keep_dying_fails_with_the_reason(db: None) -> None:
    version = stored_builtin("logsumexp_rows")
    evaluation, _ = evaluation_request(
        version=version, source_text="int x;", options=CORRECTNESS_ONLY
    )
    Evaluation.objects.filter(pk=evaluation.pk).update(attempts=2, status="running")

    result = evaluation_execute(evaluation.pk, max_attempts=2)

    assert result.status == "failed" and result.verdict is None
    assert "gave up after 2 attempts" in result.error


def test_a_device_worker_evaluates_a_queued_candidate(transactional_db: None) -> None:
    version = stored_builtin("logsumexp_rows")
    source = next(f for f in read_builtin_suite() if f.spec.slug == "logsumexp_rows").naive_source
    with celery_worker(process_env("single-machine"), "device.cpu", "device@test"):
        evaluation = evaluation_start(version=version, source_text=source, options=CORRECTNESS_ONLY)
        deadline = time.monotonic() + 120
        while evaluation.status in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.25)
            evaluation.refresh_from_db()
    assert evaluation.status == "done", evaluation.error
    assert evaluation.attempts == 1 and evaluation.verdict["status"] == "correct"


def wait_for_verdict(evaluation: Evaluation, timeout: float = 120) -> Evaluation:
    deadline = time.monotonic() + timeout
    while evaluation.status in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.25)
        evaluation.refresh_from_db()
    return evaluation


def test_an_evaluation_whose_message_was_lost_runs_once_when_asked_for_again(
    transactional_db: None,
) -> None:
    """A requester killed between storing the evaluation and sending its message left it
    queued with no message; the replayed iteration asks again."""
    version = stored_builtin("logsumexp_rows")
    source = next(f for f in read_builtin_suite() if f.spec.slug == "logsumexp_rows").naive_source
    request = {"version": version, "source_text": source, "options": CORRECTNESS_ONLY}
    stranded, to_run = evaluation_request(**request)  # stored; no message was ever sent
    assert to_run and stranded.status == "queued"
    with celery_worker(process_env("single-machine"), "device.cpu", "device@test"):
        asked_again = wait_for_verdict(evaluation_start(**request))
        evaluation_start(**request)  # a third ask after the verdict runs nothing
        time.sleep(1)
    asked_again.refresh_from_db()
    assert asked_again.pk == stranded.pk and asked_again.status == "done", asked_again.error
    assert asked_again.attempts == 1


def test_a_message_sent_again_leaves_an_evaluation_a_worker_has(db: None) -> None:
    version = stored_builtin("logsumexp_rows")
    evaluation, _ = evaluation_request(version=version, source_text="int x;",
                                       options=CORRECTNESS_ONLY)  # fmt: skip
    assert claim_attempt(evaluation.pk, 3, "device@one") is not None  # now running there
    assert claim_attempt(evaluation.pk, 3, "device@two", only_if_queued=True) is None
    evaluation.refresh_from_db()
    held = (evaluation.status, evaluation.attempts, evaluation.worker)
    assert held == ("running", 1, "device@one")


@pytest.mark.parametrize("flag", ["-lcurl", "-Wl,-rpath,/tmp", "-I/etc", "-DNDEBUG"])
def test_flags_outside_the_allowlist_are_rejected(db: None, flag: str) -> None:
    operator = operator_under_test(stored_builtin("logsumexp_rows"))
    verdict = evaluate_candidate(
        operator, "int kope_kernel;", EvalSettings(timing=False, extra_flags=(flag,))
    )
    assert verdict["status"] == "rejected" and f"flags not allowed: {flag}" in verdict["reason"]


def test_targets_declare_what_they_run_and_unknown_ones_are_refused() -> None:
    from apps.core.errors import DomainError
    from apps.devices.targets import target_get

    cpu = target_get("cpu-c")
    assert cpu.queue == "device.cpu" and cpu.entry_point == "kope_kernel"
    assert "float32" in cpu.dtypes and "float16" not in cpu.dtypes
    with pytest.raises(DomainError, match="target 'ascend-c' is not available"):
        target_get("ascend-c")


def timing_run(run_id: str, elements: int, *, timing: bool) -> Run:
    meta = {"shape": [elements], "dtype": "float32", "file": "x", "sha256": ""}
    return Run(run_id, run_id, {}, "float32", 0, [], timing=timing,
               generated={"inputs": [meta], "outputs": [meta], "scalars": []})  # fmt: skip


def measured(candidate_ms: float, reference_ms: float, small_ms: float) -> dict[str, object]:
    def samples(ms: float) -> list[int]:
        return [int(ms * 1_000_000)] * 5

    return {"candidate_ns": samples(candidate_ms), "reference_ns": samples(reference_ms),
            "scaling_ns": samples(small_ms), "wrong_calls": [], "status": 0}  # fmt: skip


def test_timing_flags_an_implausible_speedup_and_a_time_that_does_not_grow() -> None:
    big, small = (
        timing_run("big", 1_000_000, timing=True),
        timing_run("small", 10_000, timing=False),
    )
    flags: list[str] = []
    summary = timing_summary(big, small, measured(1.0, 20.0, 0.9), EvalSettings(repeats=5), flags)

    assert summary["ok"] and summary["speedup"] == pytest.approx(20.0)
    assert summary["scaling"]["work_ratio"] == pytest.approx(100.0)
    assert flags == [
        "implausible speedup 20.0x vs the reference: review before trusting",
        "time does not grow with input size (100x the elements, 1.11x the time)",
    ]


def test_an_honest_timing_raises_no_flag() -> None:
    big, small = (
        timing_run("big", 1_000_000, timing=True),
        timing_run("small", 10_000, timing=False),
    )
    flags: list[str] = []
    summary = timing_summary(big, small, measured(10.0, 20.0, 0.2), EvalSettings(repeats=5), flags)
    assert summary["speedup"] == pytest.approx(2.0) and flags == []


def three_times(source: str) -> str:
    """The same kernel doing its whole work three times over."""
    return (f"#define kope_kernel static kope_once\n{source}\n#undef kope_kernel\n"
            "int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,\n"
            "                int32_t n_outputs, const double *attrs, int32_t n_attrs) {\n"
            "    int status = 0;\n"
            "    for (int rep = 0; rep < 3 && status == 0; ++rep)\n"
            "        status = kope_once(inputs, n_inputs, outputs, n_outputs, attrs, n_attrs);\n"
            "    return status;\n}\n")  # fmt: skip


def test_a_stored_baseline_is_timed_beside_the_candidate_in_its_process(db: None) -> None:
    """The loop sends the parent as the baseline: timed in turn with the candidate, a parent
    doing three times the work is seen about three times slower (a busy machine stretches the
    ratio a little: cache and memory bandwidth are shared with whatever else runs)."""
    version = stored_builtin("gemm")
    naive = next(f for f in read_builtin_suite() if f.spec.slug == "gemm").naive_source
    slow = kernel_source_store(three_times(naive))
    options = EvalSettings(seeds=1, warmup=1, repeats=9, baseline_sha256=slow.sha256)
    evaluation, _ = evaluation_request(version=version, source_text=naive, options=options)

    verdict = evaluation_execute(evaluation.pk, max_attempts=1).verdict

    timed = verdict["timed"]
    assert verdict["status"] == "correct" and timed["ok"], verdict
    assert timed["baseline"]["samples"] == timed["candidate"]["samples"] == 9
    assert 2.0 < timed["vs_baseline"] < 5.0, timed
    assert timed["vs_baseline"] == pytest.approx(statistics.median(
        b / c for b, c in zip(timed["baseline_samples_ms"], timed["candidate_samples_ms"],
                              strict=True)
    ))  # fmt: skip
    assert EvalSettings.from_json(evaluation.options) == options


def test_a_verdict_says_how_many_seconds_each_stage_took(db: None) -> None:
    """Where an evaluation's time goes: each stage that ran, in order, summing to at most the
    evaluation's wall time; the plain verdict prints them."""
    version = stored_builtin("relu")
    naive = next(f for f in read_builtin_suite() if f.spec.slug == "relu").naive_source
    options = EvalSettings(seeds=1, warmup=1, repeats=3, profile=True)
    started = time.perf_counter()
    verdict = evaluate_candidate(operator_under_test(version), naive, options, naive)
    wall_s = time.perf_counter() - started

    stages = verdict["stage_seconds"]
    assert verdict["status"] == "correct", verdict
    assert list(stages) == ["compile", "vet", "reference", "correctness", "judge", "timing",
                            "profile"]  # fmt: skip
    assert all(seconds >= 0 for seconds in stages.values())
    assert stages["timing"] > 0 and stages["profile"] > 0
    assert sum(stages.values()) <= wall_s
    assert "seconds by stage: compile " in describe_verdict(verdict)


def test_the_judge_shortcut_for_finite_outputs_agrees_with_the_full_comparison() -> None:
    """Finite chunks take a shorter path than those with a NaN or an infinity; on finite
    numbers both must give the same errors and the same verdict, at the tolerance's edge too."""
    spec = next(f for f in read_builtin_suite() if f.spec.slug == "relu").spec
    rng = np.random.default_rng(7)
    expected = rng.standard_normal(4096).astype(np.float32) * 100
    verdicts = []
    edge = (spec.max_abs + spec.max_rel * np.abs(expected.astype(np.float64))).astype(np.float32)
    for actual in (expected.copy(), expected + edge * 0.5, expected + edge * 3,
                   expected + rng.standard_normal(4096).astype(np.float32) * 1e-3):  # fmt: skip
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        general = nonfinite_chunk_errors(a, e, np.abs(a - e), spec)
        assert chunk_errors(actual, expected, spec) == general
        verdicts.append(general[2])
    assert verdicts == [True, True, False, False]  # the last: noise beyond a tight tolerance
    whole = np.arange(64, dtype=np.int32)
    assert chunk_errors(whole, whole, spec) == (0.0, 0.0, True, False)
    assert chunk_errors(whole + 1, whole, spec)[2] is False
    with_nan = expected.copy()
    with_nan[5] = np.nan
    assert chunk_errors(with_nan, expected, spec)[2:] == (False, True)


def test_a_baseline_that_is_not_stored_fails_the_evaluation_with_why(db: None) -> None:
    version = stored_builtin("gemm")
    naive = next(f for f in read_builtin_suite() if f.spec.slug == "gemm").naive_source
    options = EvalSettings(seeds=1, warmup=1, repeats=2, baseline_sha256="ab" * 32)
    evaluation, _ = evaluation_request(version=version, source_text=naive, options=options)

    failed = evaluation_execute(evaluation.pk, max_attempts=1)

    assert (
        failed.status == "failed" and "baseline kernel abababababab is not stored" in failed.error
    )


def test_settings_without_a_baseline_keep_the_key_they_were_stored_under() -> None:
    plain = EvalSettings(seeds=2, extra_flags=("-funroll-loops",))
    assert "baseline_sha256" not in plain.as_json()
    assert EvalSettings.from_json(plain.as_json()) == plain


def test_a_verdict_with_infinite_errors_is_stored_and_told(db: None) -> None:
    """A NaN or a missing output is an error of infinity, which JSON has no number for."""
    from apps.devices.services import evaluation_record
    from apps.devices.verdicts import describe_verdict

    version = stored_builtin("gemm")  # any operator; gemm's cases are small in bytes
    evaluation, _ = evaluation_request(
        version=version, source_text="int x;", options=CORRECTNESS_ONLY
    )
    verdict = evaluate_candidate(operator_under_test(version), NAN_OUTPUT, CORRECTNESS_ONLY)
    assert verdict["status"] == "incorrect"

    stored = evaluation_record(evaluation, verdict)

    stored.refresh_from_db()
    failing = [c for c in stored.verdict["correct"]["cases"] if not c["passed"]]
    assert failing and all(c["max_abs"] == "inf" for c in failing)
    assert "max_abs=" in describe_verdict(stored.verdict)


NAN_OUTPUT = """#include <math.h>
#include "kope_kernel.h"
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    float *y = (float *)outputs[0].data;
    for (int64_t i = 0; i < kope_numel(&outputs[0]); ++i) y[i] = NAN;
    return 0;
}
"""


def test_a_host_that_slows_down_midway_does_not_tip_the_side_by_side_ratio() -> None:
    """A kernel beside itself, ten orders; the host slows 1.5x between the two calls of the
    sixth (the baseline's went second). The baseline's median falls between the two speeds,
    the candidate's on the fast one: 1.25x from nothing. The per-order ratios see one pair
    straddle the change."""
    fast, slow = 30_000_000, 45_000_000
    candidate = [fast] * 6 + [slow] * 4
    baseline = [fast] * 5 + [slow] * 5

    assert statistics.median(baseline) / statistics.median(candidate) == 1.25
    assert paired_ratio(baseline, candidate) == 1.0


def test_a_done_line_whose_status_is_no_int32_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "correctness.log"  # the kernel can print protocol lines too
    huge, too_big, arabic = "9" * 5000, str(2**31), "\u0663"
    log.write_text(f"start c0s0\ndone c0s0 {huge}\ndone c0s0 -7\ndone c1s0 {too_big}\n"
                   f"done c2s0 {arabic}\ndone c3s0 {-(2**31)}\nresult {{}}\n")  # fmt: skip

    outcome = read_outcome(log, 0, False)

    assert outcome.finished == {"c0s0": -7, "c3s0": -(2**31)}


def test_a_kernel_printing_a_huge_status_gets_its_verdict(
    db: None, past_the_scan: list[str]
) -> None:
    source = (KERNELS / "prints_huge_status.c").read_text()
    evaluation, _ = evaluation_request(version=stored_builtin("gemm"), source_text=source,
                                       options=EvalSettings(seeds=1, timing=False))  # fmt: skip

    done = evaluation_execute(evaluation.pk, max_attempts=1)

    assert past_the_scan  # its raw write
    assert done.status == "done" and done.verdict["status"] == "correct", done.error


def test_an_unexpected_error_in_the_evaluator_fails_the_evaluation_with_it(
    db: None, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.KOPE_EVAL_WORK_DIR = "/nonexistent/kope-work"  # mkdtemp raises FileNotFoundError
    naive = next(f for f in read_builtin_suite() if f.spec.slug == "gemm").naive_source
    evaluation, _ = evaluation_request(version=stored_builtin("gemm"), source_text=naive,
                                       options=CORRECTNESS_ONLY)  # fmt: skip

    failed = evaluation_execute(evaluation.pk, max_attempts=2)

    failed.refresh_from_db()
    assert failed.status == "failed" and failed.verdict is None
    assert failed.error.startswith("the evaluator failed (FileNotFoundError: ")
    assert "/nonexistent/kope-work" in failed.error
    assert f"evaluation {evaluation.pk} failed in the evaluator" in caplog.text
