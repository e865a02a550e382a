"""A team's memory as sessions leave it, in PostgreSQL: recorded cases (each with its journal
event) and the experiences distilled from them, and the cases that adopted an experience."""

from __future__ import annotations

from typing import Any

from apps.accounts.models import Team
from apps.memory.models import Case, MemoryVector
from apps.operators.models import OperatorVersion
from apps.runs.models import OptimizationSession
from tests.factories import stored_builtin
from tests.memory.test_retrieval import record_case

PARALLEL = "omp_parallel_for(loop=L0, schedule=static)"
OPERATORS = ("gemm", "batched_matmul", "matmul_bias_relu", "gelu")


class Memory:
    """A team's recorded cases and experiences, as sessions leave them."""

    def __init__(self, team: Team) -> None:
        self.team = team
        self.session = OptimizationSession.objects.create(team=team, target="cpu-c")
        self.versions: dict[str, OperatorVersion] = {}
        self.iteration = 0

    def case(self, operator: str, strategy: str, outcome: str, speedup: float | None,
             **fields: Any) -> Case:  # fmt: skip
        if operator not in self.versions:
            self.versions[operator] = stored_builtin(operator, self.team)
        self.iteration += 1
        return record_case(self.session, self.versions[operator], self.iteration,
                           strategy=strategy, outcome=outcome, speedup_vs_parent=speedup,
                           correct=outcome not in ("incorrect", "crashed"), **fields)  # fmt: skip

    def experience(self, strategy: str = PARALLEL, outcome: str = "improved",
                   **fields: Any) -> MemoryVector:  # fmt: skip
        source = self.case("gemm", strategy, outcome, 1.8 if outcome == "improved" else 1.0)
        defaults = {"kind": "case", "text": f"gemm: {strategy}", "team": self.team,
                    "target": "cpu-c", "family": "matmul", "dtype": "float32",
                    "shape_class": "large", "value": 0.3, "adoptions": 6,
                    "adopted_operators": list(OPERATORS)}  # fmt: skip
        return MemoryVector.objects.create(key=f"case:{source.pk}", **(defaults | fields))

    def adopted(self, item: MemoryVector, operator: str, outcome: str = "improved",
                speedup: float | None = 1.5, strategy: str = PARALLEL) -> Case:  # fmt: skip
        return self.case(operator, strategy, outcome, speedup,
                         adopted=[{"key": item.key, "why": "same loop nest"}])  # fmt: skip


def adopted_on_three(memory: Memory, item: MemoryVector, outcome: str = "improved") -> None:
    for operator, speedup in zip(OPERATORS[:3], (1.4, 1.9, 2.6), strict=True):
        memory.adopted(item, operator, outcome, speedup)
