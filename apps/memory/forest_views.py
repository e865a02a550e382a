"""The forest and case pages.

The forest is drawn on demand: roots first, and the children of a node only when it is
opened (the `open` parameter lists the opened nodes, so a view can be shared as a link; with
JavaScript, htmx fetches one node's children in place). Filters hide nodes that do not match
and say how many; the ancestors of a match stay, so the path to it can be followed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.access import team_view
from apps.accounts.models import Membership, Team
from apps.accounts.roles import Permission
from apps.core.code_html import c_code_html
from apps.memory import selectors as memory_selectors
from apps.memory.forest import (
    Node,
    load_forest,
    path_to,
    roots,
    team_cases_of_slug,
    team_forest,
)
from apps.memory.models import Case, JournalEvent
from apps.memory.remeasure import measure_again, measured_settings, measurements_again
from apps.operators import selectors

FAILED = {"compile_error", "incorrect", "crashed", "timed_out", "rejected"}


@dataclass(frozen=True)
class Filters:
    """`session_text` is the session filter as typed: empty is no filter, and one that is no
    session number (`session` None) matches nothing and says why (never "no filter")."""

    outcome: str = ""
    session: int | None = None
    strategy: str = ""
    session_text: str = ""

    @classmethod
    def from_query(cls, query: Any) -> Filters:
        session = query.get("session", "").strip()[:30]
        return cls(query.get("outcome", ""), as_int(session),
                   query.get("strategy", "").strip()[:200], session)  # fmt: skip

    @property
    def session_error(self) -> str:
        if self.session_text and self.session is None:
            return f"Session: a session number such as 12, not {self.session_text!r}."
        return ""

    def active(self) -> bool:
        return bool(self.outcome or self.session_text or self.strategy)

    def matches(self, node: Node) -> bool:
        outcome = not self.outcome or node.outcome == self.outcome
        session = not self.session_text or node.session_id == self.session
        strategy = not self.strategy or self.strategy.lower() in node.strategy.lower()
        return outcome and session and strategy


def as_int(text: str) -> int | None:
    """A whole number from a query parameter; None for anything else ("", "x", "²")."""
    return int(text) if text.isascii() and text.isdigit() else None


def visible_ids(nodes: dict[int, Node], filters: Filters) -> set[int]:
    """Matching nodes and their ancestors."""
    if not filters.active():
        return set(nodes)
    shown: set[int] = set()
    for node in nodes.values():
        if filters.matches(node):
            current: Node | None = node
            while current is not None and current.id not in shown:
                shown.add(current.id)
                current = nodes.get(current.parent_id) if current.parent_id else None
    return shown


def node_view(node: Node, opened: set[int], shown: set[int]) -> dict[str, Any]:
    child_count = sum(c.id in shown for c in node.children)
    expanded = node.id in opened
    return {
        "node": node, "child_count": child_count, "expanded": expanded,
        "opens": expanded and child_count > 0, "closes": range(0),
        "state": "failed" if node.outcome in FAILED else node.outcome,
        "shade": shade(node.speedup),
    }  # fmt: skip


def tree_rows(tops: list[Node], opened: set[int], shown: set[int]) -> list[dict[str, Any]]:
    """The shown nodes under these, in page order, down through the opened ones. A row either
    opens its children's list or closes itself and `closes` lists above it, so the template
    nests them without recursing (a path opened a few hundred levels deep would exceed
    Python's recursion limit in a recursive template, and a chain of attempts is that deep)."""
    rows: list[dict[str, Any]] = []
    depths: list[int] = []
    stack = [(node, 0) for node in reversed(tops)]
    while stack:
        node, depth = stack.pop()
        row = node_view(node, opened, shown)
        rows.append(row)
        depths.append(depth)
        if row["opens"]:
            shown_children = [c for c in node.children if c.id in shown]
            stack.extend((child, depth + 1) for child in reversed(shown_children))
    for n, row in enumerate(rows):
        if not row["opens"]:
            following = depths[n + 1] if n + 1 < len(rows) else 0
            row["closes"] = range(depths[n] - following)
    return rows


def shade(speedup: float | None) -> int:
    """1 (pale) .. 4 (full): speedup vs PyTorch eager below 0.25, 0.5, 1, and 1 or more."""
    value = speedup or 0.0
    return 1 + sum(value >= bound for bound in (0.25, 0.5, 1.0))


@team_view()
def forest_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    team = membership.team
    operators = sorted(
        set(
            Case.objects.filter(session__team=team).values_list(
                "version__operator__slug", flat=True
            )
        )
    )
    slug = request.GET.get("operator") or (operators[0] if operators else "")
    targets = operator_targets(team, slug)
    target = forest_target(request.GET.get("target", ""), targets)
    opened = {n for i in request.GET.get("open", "").split(",") if (n := as_int(i)) is not None}
    filters = Filters.from_query(request.GET)
    context: dict[str, Any] = {"section": "forest", "operators": operators, "slug": slug,
                               "targets": targets, "target": target, "filters": filters, "rows": [],
                               "opened": ",".join(map(str, sorted(opened)))}  # fmt: skip
    if slug:
        selectors.operator_get(team, slug)  # an operator the team cannot see is not found
        nodes = team_forest(team.pk, slug, target)
        shown = visible_ids(nodes, filters)
        context.update(
            rows=tree_rows([r for r in roots(nodes) if r.id in shown], opened, shown),
            total=len(nodes),
            hidden=len(nodes) - len(shown),
        )
    status = 400 if filters.session_error else 200
    return render(request, "memory/forest.html", context, status=status)


def operator_targets(team: Team, slug: str) -> list[str]:
    """The targets the team's cases of this operator ran on (a forest is one target's)."""
    return sorted(set(team_cases_of_slug(team.pk, slug).values_list("target", flat=True)))


def forest_target(requested: str, targets: list[str]) -> str:
    """The requested target where the operator has cases, else its first one (a target kept
    from another operator's forest would show an empty one)."""
    if requested in targets or not targets:
        return requested or "cpu-c"
    return targets[0]


@team_view()
def forest_children(request: HttpRequest, membership: Membership, case_id: int) -> HttpResponse:
    """One node's children, for htmx to put in place when a node is opened."""
    case = team_case(membership, case_id)
    nodes = load_forest(case.version.operator, case.target, membership.team.pk)
    filters = Filters.from_query(request.GET)
    shown = visible_ids(nodes, filters)
    children = tree_rows([c for c in nodes[case.pk].children if c.id in shown], set(), shown)
    context = {"children": children, "slug": case.version.operator.slug, "target": case.target,
               "filters": filters, "opened": ""}  # fmt: skip
    return render(request, "memory/forest.html#children", context)


def team_case(membership: Membership, case_id: int) -> Case:
    case = memory_selectors.team_case(membership.team, case_id)
    if case is None:
        raise Http404(f"No case {case_id}.")
    return case


def diff_lines(old: str, new: str) -> list[tuple[str, str]]:
    """Unified diff lines with their kind: add, del, hunk or context (text is escaped later)."""
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), "parent", "this case",
                                 lineterm="", n=3)  # fmt: skip
    return [(kinds.get(line[:1], "context"), line) for line in list(lines)[2:]]


@team_view()
def case_page(request: HttpRequest, membership: Membership, case_id: int) -> HttpResponse:
    case = team_case(membership, case_id)
    source = case.source.text if case.source else ""
    parent_source = case.parent.source.text if case.parent and case.parent.source else ""
    slug = case.version.operator.slug
    context_event = JournalEvent.objects.filter(
        session_id=case.session_id, kind="context_assembled", payload__operator=slug,
        payload__iteration=case.iteration,
    ).first()  # fmt: skip
    context = {
        "section": "forest", "case": case, "slug": slug, "code": c_code_html(source),
        "diff": diff_lines(parent_source, source) if case.parent else [],
        "path": path_to(case), "children": case.children.order_by("iteration", "pk"),
        "context_record": context_event.payload if context_event else None,
        "failing": [c for c in case.validation.get("cases", []) if not c.get("passed")],
        "reused_from": verdict_first_recorded_by(case, membership.team),
        **measuring_again(membership, case),
    }  # fmt: skip
    if request.GET.get("part") == "measurements":  # polled while a measurement is under way
        return render(request, "memory/case.html#measurements", context)
    return render(request, "memory/case.html", context)


def measuring_again(membership: Membership, case: Case) -> dict[str, Any]:
    measurements = measurements_again(membership.team, case)
    return {"measurements": measurements,
            "measuring": any(m.pending for m in measurements),
            "can_measure": (membership.allows(Permission.RUN)
                            and measured_settings(membership.team, case) is not None)}  # fmt: skip


@require_POST
@team_view(Permission.RUN)
def case_measure_again(request: HttpRequest, membership: Membership, case_id: int) -> HttpResponse:
    """Queue the case's kernel to be measured again under its verdict's settings."""
    case = team_case(membership, case_id)
    if measure_again(membership.team, case, request.user) is None:
        return HttpResponse("This case was never timed: there is nothing to measure again.",
                            status=409, content_type="text/plain")  # fmt: skip
    return redirect(
        f"{reverse('case', kwargs={'team': membership.team.slug, 'case_id': case.pk})}#measurements"
    )


def verdict_first_recorded_by(case: Case, team: Team) -> Case | None:
    """The team's earlier case whose verdict this one reused: the same source judged under the
    same settings is not measured again (a re-run's cases read every figure from the first
    run's), so their side-by-side ratios are the first run's too."""
    evaluation_id = case.feedback.get("evaluation_id")
    if not isinstance(evaluation_id, int):
        return None
    earlier = Case.objects.filter(session__team=team, pk__lt=case.pk,
                                  feedback__evaluation_id=evaluation_id)  # fmt: skip
    return earlier.order_by("pk").first()
