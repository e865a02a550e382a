"""SAGE's arithmetic, checked against the seed's own numbers and at its boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.memory.learning import (
    FAILURE_SCORE,
    Resident,
    Usage,
    choose_hot_memory,
    correctness_stage_score,
    credit,
    initial_frequency,
    is_rule_candidate,
    learning_rate,
    next_frequency,
    optimization_stage_score,
    updated_value,
)

MIN_RATE = 0.05


def test_the_seeds_worked_example() -> None:
    """1 ms -> 0.6 ms scores 0.4; two adopted experiences get 0.2 each."""
    score = optimization_stage_score(1.0, 0.6)
    assert score == pytest.approx(0.4)
    feedback = credit(score, retrieved=["a", "b", "c"], adopted=["a", "b"])
    assert feedback["a"] == pytest.approx(0.2) and feedback["b"] == pytest.approx(0.2)
    assert feedback["c"] == pytest.approx(FAILURE_SCORE)  # passed over: never positive


def test_stage_scores() -> None:
    assert correctness_stage_score(True) == 1.0
    assert correctness_stage_score(False) == FAILURE_SCORE
    assert optimization_stage_score(1.0, 1.0) == FAILURE_SCORE  # no improvement
    assert optimization_stage_score(1.0, 1.2) == FAILURE_SCORE  # slower
    assert optimization_stage_score(10.0, 1.0) == pytest.approx(0.9)


def test_a_failed_stage_charges_the_adopted_items_only() -> None:
    assert credit(FAILURE_SCORE, ["a", "b", "a"], ["a", "a"]) == {"a": pytest.approx(-0.1)}
    assert credit(0.4, ["a"], []) == {}  # nothing adopted: nobody credited
    assert credit(0.4, ["a"], ["z"]) == {}  # an item that was not retrieved cannot be adopted


def test_the_learning_rate_shrinks_with_retrievals_to_its_minimum() -> None:
    assert learning_rate(0, MIN_RATE) == 1.0
    assert learning_rate(3, MIN_RATE) == 0.25
    assert learning_rate(19, MIN_RATE) == pytest.approx(0.05)
    assert learning_rate(500, MIN_RATE) == MIN_RATE


def test_value_starts_at_zero_and_follows_feedback() -> None:
    first = updated_value(0.0, 0.2, retrievals=0, minimum_rate=MIN_RATE)
    assert first == pytest.approx(0.2)
    second = updated_value(first, -0.1, retrievals=1, minimum_rate=MIN_RATE)
    assert second == pytest.approx(0.05)


@settings(max_examples=300, deadline=None)
@given(
    feedbacks=st.lists(st.floats(min_value=-0.1, max_value=1.0), min_size=1, max_size=50),
)
def test_value_stays_within_the_feedback_range(feedbacks: list[float]) -> None:
    value = 0.0
    for n, feedback in enumerate(feedbacks):
        value = updated_value(value, feedback, retrievals=n, minimum_rate=MIN_RATE)
        assert -0.1 <= value <= 1.0


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (Usage(value=0.01, adoptions=3, operators=3), True),
        (Usage(value=0.01, adoptions=2, operators=3), False),
        (Usage(value=0.01, adoptions=3, operators=2), False),
        (Usage(value=0.0, adoptions=3, operators=3), False),
        (Usage(value=-0.05, adoptions=9, operators=9), False),
    ],
)
def test_the_rule_candidate_gate_is_exact_at_its_boundaries(usage: Usage, expected: bool) -> None:
    assert is_rule_candidate(usage, min_adoptions=3, min_operators=3) is expected


def test_seven_unused_updates_bring_frequency_to_about_48_percent() -> None:
    start = initial_frequency(retrievals=6, eligible_stages=10)
    frequency = start
    for _ in range(7):
        frequency = next_frequency(frequency, used=False, beta=0.1)
    assert frequency / start == pytest.approx(0.478, abs=0.001)
    assert next_frequency(0.5, used=True, beta=0.1) == pytest.approx(0.55)


def test_a_shorter_rule_enters_where_a_longer_one_did_not_fit() -> None:
    rules = [
        Resident("first", value=0.9, frequency=1.0, tokens=5000),  # priority 1.8e-4
        Resident("too_long", value=0.9, frequency=1.0, tokens=6000),  # 1.5e-4: would overflow
        Resident("short", value=0.04, frequency=1.0, tokens=300),  # 1.3e-4: still fits
    ]
    chosen = [r.key for r in choose_hot_memory(rules, budget_tokens=10_000)]
    assert chosen == ["first", "short"]


@settings(max_examples=300, deadline=None)
@given(
    rules=st.lists(
        st.builds(
            Resident,
            key=st.text(min_size=1, max_size=8),
            value=st.floats(min_value=-0.1, max_value=1.0),
            frequency=st.floats(min_value=0.0, max_value=1.0),
            tokens=st.integers(min_value=1, max_value=12_000),
        ),
        max_size=40,
        unique_by=lambda r: r.key,
    ),
    budget=st.integers(min_value=0, max_value=20_000),
)
def test_hot_memory_never_exceeds_its_budget(rules: list[Resident], budget: int) -> None:
    chosen = choose_hot_memory(rules, budget)
    assert sum(r.tokens for r in chosen) <= budget
    left_out = [r for r in rules if r not in chosen]
    room = budget - sum(r.tokens for r in chosen)
    assert all(r.tokens > room for r in left_out)  # greedy: nothing left out would still fit
