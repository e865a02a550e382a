"""The lineage forest: per operator and target, every attempt with at most one parent.

Branches that failed stay, as failure evidence. Queries load one forest's few columns at once
and walk it in memory: a forest of thousands of cases is a few hundred kilobytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from apps.memory.models import Case
from apps.operators.models import Operator

NODE_FIELDS = ("pk", "parent_id", "iteration", "session_id", "outcome", "correct",
               "speedup_vs_reference", "latency_ms", "strategy")  # fmt: skip


@dataclass
class Node:
    id: int
    parent_id: int | None
    iteration: int
    session_id: int
    outcome: str
    correct: bool
    speedup: float | None
    latency_ms: float | None
    strategy: str
    children: list[Node] = field(default_factory=list)

    def as_json(self, depth: int | None) -> dict[str, Any]:
        shown = depth is None or depth > 0
        deeper = None if depth is None else depth - 1
        return {
            "id": self.id, "parent": self.parent_id, "iteration": self.iteration,
            "session": self.session_id, "outcome": self.outcome, "correct": self.correct,
            "speedup": self.speedup, "latency_ms": self.latency_ms, "strategy": self.strategy[:200],
            "child_count": len(self.children),
            "children": [c.as_json(deeper) for c in self.children] if shown else [],
        }  # fmt: skip


def forest_cases(operator: Operator, target: str, team_id: int | None = None) -> QuerySet[Case]:
    cases = Case.objects.filter(version__operator=operator, target=target)
    return cases if team_id is None else cases.filter(session__team_id=team_id)


def load_forest(operator: Operator, target: str, team_id: int | None = None) -> dict[int, Node]:
    """One forest: every team's cases, or one team's (what its pages show)."""
    return forest_of(forest_cases(operator, target, team_id))


def team_cases_of_slug(team_id: int, slug: str) -> QuerySet[Case]:
    """The team's cases of every operator of this slug, as its forest page lists operators: a
    team's own operator of a shared one's slug leaves the team's attempts on the shared one."""
    return Case.objects.filter(session__team_id=team_id, version__operator__slug=slug)


def team_forest(team_id: int, slug: str, target: str) -> dict[int, Node]:
    return forest_of(team_cases_of_slug(team_id, slug).filter(target=target))


def forest_of(cases: QuerySet[Case]) -> dict[int, Node]:
    rows = cases.order_by("pk").values_list(*NODE_FIELDS)
    nodes = {row[0]: Node(*row) for row in rows}
    for node in nodes.values():
        if node.parent_id in nodes:
            nodes[node.parent_id].children.append(node)
    return nodes


def roots(nodes: dict[int, Node]) -> list[Node]:
    return [n for n in nodes.values() if n.parent_id is None or n.parent_id not in nodes]


def path_to(case: Case) -> list[Case]:
    """From the root down to this case."""
    path = [case]
    seen = {case.pk}
    while path[-1].parent_id is not None and path[-1].parent_id not in seen:
        parent = Case.objects.get(pk=path[-1].parent_id)
        seen.add(parent.pk)
        path.append(parent)
    return list(reversed(path))


def children_of(case: Case) -> QuerySet[Case]:
    return case.children.order_by("iteration", "pk")


def descendants(node: Node) -> list[Node]:
    found, stack = [], list(node.children)
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(current.children)
    return found


def faster(a: Node | None, b: Node) -> Node:
    """The faster of two correct nodes (lower latency; speedup when latency is unknown)."""
    if a is None:
        return b
    if a.latency_ms is not None and b.latency_ms is not None:
        return b if b.latency_ms < a.latency_ms else a
    return b if (b.speedup or 0) > (a.speedup or 0) else a


def best_per_branch(operator: Operator, target: str) -> list[dict[str, Any]]:
    """A branch is what grew from one child of a root (or a root with no children): its best
    correct case, or None when the whole branch failed."""
    results = []
    for root in roots(load_forest(operator, target)):
        branches = root.children or [root]
        for head in branches:
            best = None
            for node in [head, *descendants(head)]:
                if node.correct:
                    best = faster(best, node)
            results.append({"root": root.id, "branch": head.id, "best": best.id if best else None,
                            "speedup": best.speedup if best else None})  # fmt: skip
    return results


def subtree_json(case: Case, *, depth: int | None = 2) -> dict[str, Any]:
    """A case and its descendants (to `depth` levels; None: all), as the forest browser wants."""
    nodes = load_forest(case.version.operator, case.target)
    return nodes[case.pk].as_json(depth)
