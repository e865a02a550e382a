"""The steps of a verdict as the loop journals them (no database)."""

from __future__ import annotations

from apps.devices.verdicts import verdict_steps


def test_a_verdict_that_did_not_compile_is_one_step_with_its_first_five_errors() -> None:
    errors = [f"kernel.c:{line}: error" for line in range(8)]

    steps = verdict_steps({"compiled": {"ok": False, "errors": errors}})

    assert steps == [("compiled", {"ok": False, "detail": {"cached": False,
                                                           "errors": errors[:5]}})]  # fmt: skip


def test_a_timed_verdict_gives_its_steps_in_order_with_only_the_first_failing_cases() -> None:
    cases = [{"id": i, "passed": i % 2 == 0} for i in range(30)]
    verdict = {
        "timed": {"ok": True, "case_id": 3, "speedup": 2.0, "threads": 4, "vs_baseline": 1.25,
                  "candidate": {"median_ms": 1.0}, "reference": {"median_ms": 2.0}},
        "correct": {"ok": True, "runs": 30, "failed": 15, "cases": cases},
        "compiled": {"ok": 1, "cached": True},
    }  # fmt: skip

    steps = dict(verdict_steps(verdict))

    assert list(steps) == ["compiled", "case_results", "timed"]
    assert steps["compiled"] == {"ok": True, "detail": {"cached": True, "errors": []}}
    failing = steps["case_results"]["detail"]["failing"]
    assert [c["id"] for c in failing] == [1, 3, 5, 7, 9, 11, 13, 15, 17, 19]
    assert steps["timed"] == {"ok": True, "detail": {
        "case_id": 3, "speedup": 2.0, "reason": None, "threads": 4, "vs_baseline": 1.25,
        "median_ms": 1.0, "reference_median_ms": 2.0}}  # fmt: skip


def test_a_timing_without_a_baseline_or_measurements_says_only_what_it_has() -> None:
    steps = verdict_steps({"timed": {"ok": False, "reason": "too slow"}})

    assert steps == [("timed", {"ok": False, "detail": {
        "case_id": None, "speedup": None, "reason": "too slow", "threads": None}})]  # fmt: skip
