"""Runs: every supported case, several seeds; the first seed again to catch nondeterminism."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from apps.devices.evaluator.settings import TARGET, EvaluationError
from apps.operators.spec import OperatorSpec


@dataclass(frozen=True)
class OperatorUnderTest:
    """What the pipeline needs of an operator version (no database access in here)."""

    label: str  # e.g. "softmax_rows v1"
    spec: OperatorSpec
    reference_kind: str
    reference_source: dict[str, Any]
    cases: list[dict[str, Any]]  # case_id, params, dtype, timing, unsupported_targets
    has_custom_check: bool = False


@dataclass
class Run:
    run_id: str
    case_id: str
    params: dict[str, Any]
    dtype: str
    seed: int
    attrs: list[float]
    timing: bool = False
    repeat_of: str | None = None  # the same inputs again: nondeterminism shows as a difference
    generated: dict[str, Any] = field(default_factory=dict)


def plan_runs(operator: OperatorUnderTest, seeds: int, *, target: str = TARGET,
              with_timing: bool = True) -> list[Run]:  # fmt: skip
    """Without timing (a GPU target on a host with no device) the timing case is left out."""
    base = secrets.randbits(31)  # fresh per evaluation; never leaves this process and refrun
    runs = []
    for index, case in enumerate(
        c for c in operator.cases if target not in c["unsupported_targets"]
    ):
        if case["timing"] and not with_timing:
            continue
        attrs = operator.spec.attribute_values(case["params"])
        for s in range(seeds_of(operator, case, seeds)):
            seed = (base + 7919 * index + 104729 * s) % 2**31
            runs.append(Run(f"c{index}s{s}", case["case_id"], case["params"], case["dtype"], seed,
                            attrs, timing=bool(case["timing"]) and s == 0))  # fmt: skip
        if not case["timing"]:  # a timing case is big: it is not run twice
            first = runs[-seeds]
            runs.append(Run(f"c{index}r", first.case_id, first.params, first.dtype, first.seed,
                            attrs, repeat_of=first.run_id))  # fmt: skip
    if not runs:
        raise EvaluationError(f"{operator.label} has no case the {target} target can represent")
    return runs


def seeds_of(operator: OperatorUnderTest, case: dict[str, Any], seeds: int) -> int:
    """A built-in operator's timing case is big, and what its size can reveal (index overflow,
    a buffer too small) one seed shows: its small cases get the fresh seeds. An imported
    problem's cases are all the shapes its suite gives, so each gets every seed (the timing
    case's first one is timed): a kernel that fits one draw of them fails another."""
    if case["timing"] and operator.reference_kind not in SUITE_REFERENCE_KINDS:
        return 1
    return seeds


SUITE_REFERENCE_KINDS = frozenset({"kernelbench", "npukernelbench"})  # imported problems


def evaluation_bytes(operator: OperatorUnderTest, seeds: int) -> int:
    """The runs' inputs and outputs, and the judge's expected outputs beside them."""
    runs = sum((seeds_of(operator, case, seeds) + (not case["timing"])) * int(case.get("bytes", 0))
               for case in operator.cases)  # fmt: skip
    return 2 * runs
