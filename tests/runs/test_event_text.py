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
