"""The situation a policy proposes from (KOPE's context assembly): the context packed under
its token budget from the task, the incumbent kernel, the latest verdict and what memory
recalled (apps/memory/recall.py), and what the operator already tried.

`pack` and the items it ranks are apps/agents/context.py; this module chooses the items and
says which of the recalled ones made it into the context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.agents.coldstart import cold_start_documents
from apps.agents.context import ContextItem, Tier, pack
from apps.agents.policy import (
    FAILED_OUTCOMES,
    Attempt,
    KernelKey,
    OperatorBrief,
    Proposal,
    Situation,
)
from apps.memory.recall import RETRIEVAL_LIMIT, Recalled


@dataclass(frozen=True)
class Tried:
    """One earlier attempt on the operator, as far as choosing the next one needs it."""

    case_id: int
    parent_id: int | None
    source_id: int | None  # the stored kernel source: equal ids, equal code
    outcome: str
    strategy: str


@dataclass(frozen=True)
class Assembled:
    situation: Situation
    record: dict[str, Any]  # the `context_assembled` event's payload


def assemble_context(
    *, session_id: int, team_id: int, target: str, operator: OperatorBrief, iteration: int,
    rounds_left: int, tried: list[Tried], incumbent: Attempt | None, latest: Attempt | None,
    evaluated: frozenset[KernelKey], recalled: Recalled, budget_tokens: int, seed: int,
) -> Assembled:  # fmt: skip
    """The situation of iteration `iteration` of `operator` (what it `tried` so far, oldest
    first, and the kernels it `evaluated`), its context packed in `budget_tokens`, and the
    record of that packing."""
    best = incumbent
    items = context_items(operator, target, best, latest, recalled)
    packed = pack(items, budget_tokens)
    in_context = set(packed.keys_in("admitted")) | set(packed.keys_in("shortened"))
    hits = [h for h in recalled.hits if h.key in in_context]
    rules = [r for r in recalled.rules if r["key"] in in_context]
    record = {
        "operator": operator.slug, "iteration": iteration, "tokens": packed.tokens,
        "budget": packed.budget, "tokens_per_tier": packed.tokens_per_tier(),
        "admitted": packed.keys_in("admitted"), "shortened": packed.keys_in("shortened"),
        "cut": packed.keys_in("cut"),
        "retrieved": [{"key": h.key, "kind": h.kind, "operator": h.provenance["operator"],
                       "similarity": round(h.scores["similarity"], 4),
                       "value": h.scores["value"]} for h in hits],
        "hot_rules": [r["key"] for r in rules],
    }  # fmt: skip
    on_best = frozenset(t.strategy for t in tried
                        if best is not None and t.parent_id == best.case_id)  # fmt: skip
    broke = frozenset(t.strategy for t in tried if t.outcome in FAILED_OUTCOMES)
    situation = Situation(
        session_id=session_id, team_id=team_id, target=target, operator=operator,
        iteration=iteration, stage="optimization" if best else "correctness",
        rounds_left=rounds_left, incumbent=best, latest=latest, tried=on_best, context=packed,
        retrieved=hits, hot_rules=rules, seed=seed, broke=broke,
        lost=lost_on_same_source(tried, best.case_id if best else None), evaluated=evaluated,
    )  # fmt: skip
    return Assembled(situation, record)


def context_items(operator: OperatorBrief, target: str, incumbent: Attempt | None,
                  latest: Attempt | None, recalled: Recalled) -> list[ContextItem]:  # fmt: skip
    """Hot: the task, the incumbent, the latest verdict (when it is not the incumbent's) and
    hot memory's rules; warm: the retrieved items, in their order; cold: the documents."""
    items = [ContextItem("task", Tier.HOT, task_text(operator, target), required=True)]
    if incumbent is not None:
        items.append(ContextItem("incumbent", Tier.HOT, kernel_text(incumbent),
                                 short_text=incumbent.candidate.strategy, required=True,
                                 priority=2))  # fmt: skip
    if latest is not None and (incumbent is None or latest.case_id != incumbent.case_id):
        items.append(ContextItem("latest-verdict", Tier.HOT, latest.verdict_summary,
                                 short_text=latest.verdict_summary[:400], required=True,
                                 priority=1))  # fmt: skip
    items += [ContextItem(r["key"], Tier.HOT, r["text"], priority=0) for r in recalled.rules]
    items += [
        ContextItem(h.key, Tier.WARM, h.text, priority=RETRIEVAL_LIMIT - position)
        for position, h in enumerate(recalled.hits)
    ]
    return items + cold_start_documents(target)


def offered_and_adopted(
    situation: Situation, proposal: Proposal
) -> tuple[list[str], list[dict[str, str]]]:
    """The keys of the items the policy had (its context's, then those it searched for) and
    the adoptions among them it named: an adoption of an item it never had is dropped."""
    retrieved = [h.key for h in situation.retrieved] + [r["key"] for r in situation.hot_rules]
    retrieved += [key for key in proposal.retrieved if key not in set(retrieved)]
    adopted = [a for a in proposal.adopted if a.get("key") in set(retrieved)]
    return retrieved, adopted


def lost_on_same_source(tried: list[Tried], incumbent_id: int | None) -> frozenset[str]:
    """The strategies that did not improve a kernel whose source is the incumbent's."""
    sources = {t.case_id: t.source_id for t in tried}
    if incumbent_id is None or incumbent_id not in sources:
        return frozenset()
    return frozenset(
        t.strategy for t in tried
        if t.outcome != "improved" and t.parent_id is not None
        and sources.get(t.parent_id) == sources[incumbent_id]
    )  # fmt: skip


def task_text(operator: OperatorBrief, target: str) -> str:
    return (f"Optimize {operator.name} ({operator.slug}, family {operator.family}) for "
            f"{target}.\n{operator.description.strip()}\n"
            f"Tolerance: max_abs {operator.max_abs:g}, max_rel {operator.max_rel:g}.")  # fmt: skip


def kernel_text(attempt: Attempt) -> str:
    c = attempt.candidate
    latency = f"{attempt.latency_ms:.3f} ms" if attempt.latency_ms else "not timed"
    return (f"Incumbent ({c.strategy}; {latency}; threads {c.threads}; flags "
            f"{' '.join(c.flags) or 'none'}):\n```c\n{c.source}\n```")  # fmt: skip
