"""Recall, the first step of an iteration: what memory holds for the operator as it stands.

The team's hot rules (resident in every context), the retrieval hits for the operator, and
first among them the cases earlier sessions measured from the very kernel being changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apps.accounts.models import Team
from apps.memory.case_views import proposal_event
from apps.memory.keys import case_key, rule_key
from apps.memory.models import Case
from apps.memory.retrieval import Hit, Query, retrieve
from apps.memory.rules import hot_memory
from apps.memory.values import MemoryMode
from apps.operators.models import OperatorVersion

RETRIEVAL_LIMIT = 12

# A kernel as it ran: its source's sha256, its flags, its threads (agents' KernelKey).
Kernel = tuple[str, tuple[str, ...], int]


@dataclass(frozen=True)
class Recalled:
    hits: list[Hit] = field(default_factory=list)  # best first, none of them a hot rule
    rules: list[dict[str, Any]] = field(default_factory=list)  # {"key", "statement", ..., "text"}


def recall(*, team: Team, session_id: int, version: OperatorVersion, target: str,
           incumbent: Case | None, mode: MemoryMode,
           other_families_only: bool = False) -> Recalled:  # fmt: skip
    """Nothing when the session runs without memory. `other_families_only`: only what earlier
    sessions recorded on other operator families (leave-one-family-out), so no operator is
    shown its own cases, nor a case of its family or of this session."""
    if mode == MemoryMode.OFF:
        return Recalled()
    rules = hot_rules(team)
    resident = {r["key"] for r in rules}
    first = () if other_families_only else measured_from(
        incumbent, team_id=team.pk, version_id=version.pk, target=target, session_id=session_id
    )  # fmt: skip
    held_out = version.operator.family if other_families_only else None
    query = Query(text=query_text(version, incumbent), team_id=team.pk, target=target,
                  kinds=("case", "rule"), limit=RETRIEVAL_LIMIT, first=first,
                  exclude_family=held_out,
                  exclude_session_id=session_id if other_families_only else None)  # fmt: skip
    # No family filter: the family is in the query text, and a lesson from another family
    # (a loop order, a thread count) often carries over.
    hits = [h for h in retrieve(query) if h.key not in resident]
    return Recalled(hits, rules)


def query_text(version: OperatorVersion, incumbent: Case | None) -> str:
    """The same text for every iteration while the incumbent stands (embed_query keeps its
    vector)."""
    strategy = incumbent.strategy if incumbent else "the starting kernel"
    operator = version.operator
    return query_text_of(name=version.name, slug=operator.slug, family=operator.family,
                         description=version.description, strategy=strategy)  # fmt: skip


def query_text_of(*, name: str, slug: str, family: str, description: str, strategy: str) -> str:
    return (f"{name} ({slug}, {family}). {description.strip()[:300]} "
            f"Incumbent: {strategy}.")  # fmt: skip


def hot_rules(team: Team) -> list[dict[str, Any]]:
    return [
        {"key": rule_key(v.rule_id), "statement": v.statement, "applies_when": v.applies_when,
         "not_when": v.not_when, "text": f"{v.statement}\nApplies when: {v.applies_when}"}
        for v in hot_memory(team)
    ]  # fmt: skip


def measured_from(incumbent: Case | None, *, team_id: int, version_id: int, target: str,
                  session_id: int) -> tuple[str, ...]:  # fmt: skip
    """The keys of the cases earlier sessions of this team made from the incumbent's very
    kernel (source, flags, threads) on this operator version and target, newest first:
    whatever its similarity, the evaluator's verdict on a next step from here."""
    if incumbent is None or incumbent.source_id is None:
        return ()
    kernel = kernel_of(incumbent)
    children = (
        Case.objects.filter(session__team_id=team_id, version_id=version_id, target=target,
                            parent__source_id=incumbent.source_id)
        .exclude(session_id=session_id)
        .select_related("parent__source", "parent__version__operator")
        .order_by("-pk")
    )  # fmt: skip
    from_kernel: dict[int, bool] = {}
    keys = []
    for child in children:
        parent = child.parent
        assert parent is not None
        if parent.pk not in from_kernel:
            from_kernel[parent.pk] = kernel_of(parent) == kernel
        if from_kernel[parent.pk]:
            keys.append(case_key(child.pk))
    return tuple(keys)


def kernel_of(case: Case) -> Kernel:
    """The kernel a case with a source ran, as its `candidate_proposed` event proposed it
    (flags and threads included; a case without that event ran its source as it is)."""
    assert case.source is not None
    proposed = proposal_event(case)
    if proposed is None:
        return case.source.sha256, (), 1
    payload = proposed.payload
    return payload["source_sha256"], tuple(payload["flags"]), payload["threads"]
