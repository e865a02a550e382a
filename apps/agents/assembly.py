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
    candidate_of_case,
)
from apps.memory.models import Case, JournalEvent
from apps.memory.recall import RETRIEVAL_LIMIT, Recalled
from apps.operators.models import OperatorVersion
from apps.operators.spec import spec_from_json


@dataclass(frozen=True)
class Assembled:
    situation: Situation
    record: dict[str, Any]  # the `context_assembled` event's payload


def assemble_context(
    *, session_id: int, team_id: int, target: str, version: OperatorVersion, operator: str,
    iteration: int, rounds_left: int, cases: list[Case], incumbent: Case | None,
    recalled: Recalled, budget_tokens: int, seed: int,
) -> Assembled:  # fmt: skip
    """The situation of iteration `iteration` of `operator` (its `cases` so far, oldest
    first), its context packed in `budget_tokens`, and the record of that packing."""
    best = attempt_of(incumbent) if incumbent else None
    latest = attempt_of(cases[-1]) if cases else None
    items = context_items(version, target, best, latest, recalled)
    packed = pack(items, budget_tokens)
    in_context = set(packed.keys_in("admitted")) | set(packed.keys_in("shortened"))
    hits = [h for h in recalled.hits if h.key in in_context]
    rules = [r for r in recalled.rules if r["key"] in in_context]
    record = {
        "operator": operator, "iteration": iteration, "tokens": packed.tokens,
        "budget": packed.budget, "tokens_per_tier": packed.tokens_per_tier(),
        "admitted": packed.keys_in("admitted"), "shortened": packed.keys_in("shortened"),
        "cut": packed.keys_in("cut"),
        "retrieved": [{"key": h.key, "kind": h.kind, "operator": h.provenance["operator"],
                       "similarity": round(h.scores["similarity"], 4),
                       "value": h.scores["value"]} for h in hits],
        "hot_rules": [r["key"] for r in rules],
    }  # fmt: skip
    tried = frozenset(c.strategy for c in cases
                      if best is not None and c.parent_id == best.case_id)  # fmt: skip
    broke = frozenset(c.strategy for c in cases if c.outcome in FAILED_OUTCOMES)
    situation = Situation(
        session_id=session_id, team_id=team_id, target=target, operator=brief_of(version),
        iteration=iteration, stage="optimization" if best else "correctness",
        rounds_left=rounds_left, incumbent=best, latest=latest, tried=tried, context=packed,
        retrieved=hits, hot_rules=rules, seed=seed, broke=broke,
        lost=lost_on_same_source(cases, incumbent),
        evaluated=kernels_evaluated(session_id, operator, iteration),
    )  # fmt: skip
    return Assembled(situation, record)


def context_items(version: OperatorVersion, target: str, incumbent: Attempt | None,
                  latest: Attempt | None, recalled: Recalled) -> list[ContextItem]:  # fmt: skip
    """Hot: the task, the incumbent, the latest verdict (when it is not the incumbent's) and
    hot memory's rules; warm: the retrieved items, in their order; cold: the documents."""
    items = [ContextItem("task", Tier.HOT, task_text(version, target), required=True)]
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


def kernels_evaluated(session_id: int, operator: str, iteration: int) -> frozenset[KernelKey]:
    """The kernels proposed for this operator before this iteration, as they ran."""
    proposed = JournalEvent.objects.filter(
        session_id=session_id, kind="candidate_proposed", payload__operator=operator,
        payload__iteration__lt=iteration,
    ).values_list("payload", flat=True)  # fmt: skip
    return frozenset((p["source_sha256"], tuple(p["flags"]), p["threads"]) for p in proposed)


def lost_on_same_source(cases: list[Case], incumbent: Case | None) -> frozenset[str]:
    """The strategies that did not improve a kernel whose source is the incumbent's."""
    if incumbent is None:
        return frozenset()
    sources = {case.pk: case.source_id for case in cases}
    return frozenset(
        case.strategy for case in cases
        if case.outcome != "improved" and case.parent_id is not None
        and sources.get(case.parent_id) == incumbent.source_id
    )  # fmt: skip


def attempt_of(case: Case) -> Attempt:
    summary = case.feedback.get("summary", "")
    return Attempt(case.pk, candidate_of_case(case), case.outcome, case.correct,
                   case.latency_ms, summary)  # fmt: skip


def brief_of(version: OperatorVersion) -> OperatorBrief:
    spec = spec_from_json(version.spec)
    return OperatorBrief(
        slug=version.operator.slug,
        name=version.name,
        family=version.operator.family,
        description=version.description,
        version_id=version.pk,
        max_abs=spec.max_abs,
        max_rel=spec.max_rel,
    )


def task_text(version: OperatorVersion, target: str) -> str:
    spec = spec_from_json(version.spec)
    return (f"Optimize {version.name} ({version.operator.slug}, family "
            f"{version.operator.family}) for {target}.\n{version.description.strip()}\n"
            f"Tolerance: max_abs {spec.max_abs:g}, max_rel {spec.max_rel:g}.")  # fmt: skip


def kernel_text(attempt: Attempt) -> str:
    c = attempt.candidate
    latency = f"{attempt.latency_ms:.3f} ms" if attempt.latency_ms else "not timed"
    return (f"Incumbent ({c.strategy}; {latency}; threads {c.threads}; flags "
            f"{' '.join(c.flags) or 'none'}):\n```c\n{c.source}\n```")  # fmt: skip
