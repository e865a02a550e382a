"""SAGE's arithmetic, as pure functions: stage scores, adoption-traced credit (ATU), value
updates, the rule-candidate gate and hot-memory priority (UGC). Parameters come from settings
(KOPE_ATU_*, KOPE_UGC_*) through the callers; every function here takes them as arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FAILURE_SCORE = -0.1  # a stage that failed, or an optimization stage that did not improve
SCORE_RANGE = (FAILURE_SCORE, 1.0)  # feedback, and so every V, stays within this range


def correctness_stage_score(passed: bool) -> float:
    """S_c: 1 when the correctness stage ends with a correct kernel, else the failure score."""
    return 1.0 if passed else FAILURE_SCORE


def optimization_stage_score(latency_first_ms: float, latency_best_ms: float) -> float:
    """S_o = (latency_first - latency_best) / latency_first; the failure score without a gain."""
    if latency_first_ms <= 0 or latency_best_ms >= latency_first_ms:
        return FAILURE_SCORE
    return clamp((latency_first_ms - latency_best_ms) / latency_first_ms)


def clamp(value: float) -> float:
    low, high = SCORE_RANGE
    return min(high, max(low, value))


def credit(score: float, retrieved: Sequence[str], adopted: Sequence[str]) -> dict[str, float]:
    """Feedback per item for one scored stage (items deduplicated within the stage).

    Adopted items share the score equally, S / |A|, so adopting more does not inflate the
    total. How we read the seed's worked example (1 ms -> 0.6 ms: S = 0.4, two adopted items
    get 0.2 each, retrieved-but-not-adopted items get -0.2): an item that was in context and
    was passed over gets the negative of an adopter's share, never positive credit, clamped
    to the feedback range [-0.1, 1] like every feedback (so -0.1 there). When the stage
    failed (S <= 0) the passed-over items get nothing: ignoring them did not cause the failure.
    """
    chosen = list(dict.fromkeys(a for a in adopted if a in set(retrieved)))
    passed_over = [r for r in dict.fromkeys(retrieved) if r not in set(chosen)]
    feedback: dict[str, float] = {}
    if chosen:
        share = score / len(chosen)
        feedback.update({key: clamp(share) for key in chosen})
        if score > 0:
            feedback.update({key: clamp(-share) for key in passed_over})
    return feedback


def learning_rate(retrievals: int, minimum: float) -> float:
    """alpha = max(1 / (1 + N), minimum), N the item's deduplicated retrievals per stage."""
    return max(1.0 / (1 + retrievals), minimum)


def updated_value(value: float, feedback: float, retrievals: int, minimum_rate: float) -> float:
    """V <- (1 - alpha) V + alpha * feedback; stays within the feedback range."""
    alpha = learning_rate(retrievals, minimum_rate)
    return clamp((1 - alpha) * value + alpha * feedback)


@dataclass(frozen=True)
class Usage:
    """What the gate to rule candidacy looks at for one experience."""

    value: float
    adoptions: int
    operators: int  # distinct operators it was adopted on


def is_rule_candidate(usage: Usage, *, min_adoptions: int, min_operators: int) -> bool:
    """UGC: V > 0, adopted at least min_adoptions times, on at least min_operators operators."""
    return usage.value > 0 and usage.adoptions >= min_adoptions and usage.operators >= min_operators


def initial_frequency(retrievals: int, eligible_stages: int) -> float:
    """During the cold phase a rule's access frequency is retrievals / eligible stages."""
    return retrievals / eligible_stages if eligible_stages > 0 else 0.0


def next_frequency(frequency: float, used: bool, beta: float) -> float:
    """freq <- (1 - beta) freq + beta * I_used, once per stage while the rule is resident."""
    return (1 - beta) * frequency + beta * (1.0 if used else 0.0)


def residence_priority(value: float, frequency: float, tokens: int) -> float:
    """V x access frequency / length in tokens: useful, often needed, and short wins."""
    return value * frequency / max(1, tokens)


@dataclass(frozen=True)
class Resident:
    key: str
    value: float
    frequency: float
    tokens: int


def choose_hot_memory(candidates: Sequence[Resident], budget_tokens: int) -> list[Resident]:
    """Rebuilt from empty: by priority, add each rule that still fits, skip one that does not
    (a shorter rule further down may still enter)."""
    ranked = sorted(
        candidates, key=lambda r: (-residence_priority(r.value, r.frequency, r.tokens), r.key)
    )
    chosen, used = [], 0
    for rule in ranked:
        if used + rule.tokens <= budget_tokens:
            chosen.append(rule)
            used += rule.tokens
    return chosen
