"""The event log's lines: what a reader needs to follow a session without its JSON."""

from __future__ import annotations

from apps.runs.event_text import event_summary


def test_a_candidates_lines_say_how_it_ran_beside_its_parent() -> None:
    # 66.7 ms after an 81.7 ms start timed minutes earlier, yet slower beside it: "regressed"
    timed = {"ok": True, "detail": {"median_ms": 66.718, "speedup": 4.12, "vs_baseline": 0.93}}
    recorded = {"iteration": 1, "outcome": "regressed", "latency_ms": 66.718,
                "speedup_vs_parent": 0.93}  # fmt: skip

    assert event_summary("timed", timed) == (
        "66.718 ms, 0.93x vs its parent timed beside it, 4.12x vs PyTorch eager"
    )
    assert event_summary("case_recorded", recorded) == (
        "iteration 1: regressed, 66.718 ms, 0.93x vs its parent"
    )


def test_the_starting_kernels_lines_name_no_parent() -> None:
    timed = {"ok": True, "detail": {"median_ms": 81.707, "speedup": 3.95}}
    recorded = {"iteration": 0, "outcome": "no_change", "latency_ms": 81.707,
                "speedup_vs_parent": None}  # fmt: skip

    assert event_summary("timed", timed) == "81.707 ms, 3.95x vs PyTorch eager"
    assert event_summary("case_recorded", recorded) == "iteration 0: no_change, 81.707 ms"


def test_a_new_incumbent_says_the_side_by_side_timing_decided() -> None:
    """ "new incumbent … at 7.869 ms (was 5.465 ms)" read as a slower kernel winning."""
    replaced = {"operator": "gemm", "iteration": 3, "case_id": 12, "previous_case_id": 9,
                "latency_ms": 7.869, "previous_latency_ms": 5.465}  # fmt: skip
    first = replaced | {"previous_case_id": None, "previous_latency_ms": None}

    assert event_summary("incumbent_replaced", replaced) == (
        "gemm: new incumbent, case 12: faster than its parent timed beside it (7.869 ms here; "
        "the incumbent read 5.465 ms in its own, earlier evaluation)"
    )
    assert event_summary("incumbent_replaced", first) == (
        "gemm: new incumbent, case 12, the first correct kernel, at 7.869 ms"
    )


def test_an_operators_start_says_what_it_starts_from() -> None:
    """ "operator_started row_sum (from its uploaded)" was cut short."""
    uploaded = {"operator": "row_sum", "version_id": 1, "position": 0, "start": "uploaded"}

    assert event_summary("operator_started", uploaded) == (
        "row_sum started, from the kernel uploaded for this session"
    )
    assert event_summary("operator_started", uploaded | {"start": "starting kernel"}) == (
        "row_sum started, from its starting kernel"
    )
