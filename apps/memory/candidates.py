"""UGC's candidates: which experiences earned a rule, the evidence for it, its deterministic
wording, and one rule per claim.

An experience earns a rule when its own case was a correct improvement over its parent, its
V is positive, and the adoptions that improved (selectors.improving_adoptions) number at least
KOPE_UGC_MIN_ADOPTIONS on at least KOPE_UGC_MIN_OPERATORS operators. Candidates that would say
the same (one claim: wording.claim_of) become one rule listing every source; a claim any of the
team's rules already makes, whatever its status, proposes nothing again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from apps.accounts.models import Team
from apps.memory.keys import id_in_key
from apps.memory.learning import Usage, is_rule_candidate
from apps.memory.models import Case, MemoryVector, Rule
from apps.memory.rules import Wording
from apps.memory.selectors import failed_attempts, improving_adoptions
from apps.memory.wording import (
    Applicability,
    Failure,
    applies_words,
    claim_of,
    not_when_words,
    parse_label,
    statement_words,
    strategy_key,
)

PROFILE_KEYS = ("profile", "diagnostics")
PROFILE_CHARS = 160


@dataclass(frozen=True)
class Earned:
    """An experience past the gate: its vector, its case, the adoptions that improved."""

    item: MemoryVector
    case: Case
    adoptions: list[Case]
    claim: str


def source_case(item: MemoryVector) -> Case | None:
    case_id = id_in_key(item.key, "case")
    return Case.objects.filter(pk=case_id).first() if case_id is not None else None


def improved_over_parent(case: Case | None) -> bool:
    return case is not None and case.correct and case.outcome == Case.Outcome.IMPROVED


def operators_of(cases: Iterable[Case]) -> list[str]:
    return sorted({case.version.operator.slug for case in cases})


def earned(team: Team, item: MemoryVector) -> Earned | None:
    """The experience with what earned it its rule; None when it did not earn one."""
    case = source_case(item)
    if case is None or not improved_over_parent(case):
        return None
    adoptions = list(improving_adoptions(team, [item.key]))
    usage = Usage(item.value, len(adoptions), len(operators_of(adoptions)))
    if not is_rule_candidate(usage, min_adoptions=settings.KOPE_UGC_MIN_ADOPTIONS,
                             min_operators=settings.KOPE_UGC_MIN_OPERATORS):  # fmt: skip
        return None
    return Earned(item, case, adoptions, claim_of(case.strategy, family=item.family,
                                                  target=item.target))  # fmt: skip


def claims_made(team: Team) -> set[str]:
    """Every claim the team's rules make, whatever their status (a vetoed rule's too: it must
    not come back under another source): the one their evidence records, else their source's."""
    claims: set[str] = set()
    for rule in Rule.objects.filter(team=team).prefetch_related("versions"):
        recorded = {str(v.evidence["claim"]) for v in rule.versions.all() if "claim" in v.evidence}
        claims |= recorded or {claim_of_source(rule.source_key)} - {""}
    return claims


def claim_of_source(key: str) -> str:
    item = MemoryVector.objects.filter(key=key).first()
    case = source_case(item) if item else None
    if item is None or case is None:
        return ""
    return claim_of(case.strategy, family=item.family, target=item.target)


def earned_by_claim(team: Team, items: Iterable[MemoryVector]) -> list[list[Earned]]:
    """The experiences that earned a rule, one group per claim no rule makes yet; each group
    leads with its highest V (its rule's source, whose V the rule shares)."""
    made = claims_made(team)
    groups: dict[str, list[Earned]] = {}
    for item in items:
        found = earned(team, item)
        if found is not None and found.claim not in made:
            groups.setdefault(found.claim, []).append(found)
    return [sorted(group, key=lambda e: (-e.item.value, e.item.key)) for group in groups.values()]


def failures_of(team: Team, case: Case) -> list[Failure]:
    """The team's attempts of the same strategy (strategy_key) on the same target that broke
    correctness or slowed the kernel down."""
    same = strategy_key(case.strategy)
    tried = failed_attempts(team, target=case.target,
                            strategy_name=parse_label(case.strategy).name)  # fmt: skip
    return [Failure(c.pk, c.version.operator.slug, c.outcome, c.speedup_vs_parent)
            for c in tried if strategy_key(c.strategy) == same]  # fmt: skip


def group_adoptions(group: list[Earned]) -> list[Case]:
    cases = {case.pk: case for earned in group for case in earned.adoptions}
    return [cases[pk] for pk in sorted(cases)]


def evidence_for(team: Team, group: list[Earned]) -> dict[str, Any]:
    """What a reviewer checks a rule against, with the keys to look it up by."""
    lead, adoptions = group[0], group_adoptions(group)
    failures = failures_of(team, lead.case)
    return {
        "source": lead.item.key, "sources": [e.item.key for e in group], "claim": lead.claim,
        "value": lead.item.value, "adoptions": len(adoptions),
        "operators": operators_of(adoptions), "adoption_cases": [c.pk for c in adoptions],
        "speedups": [round(c.speedup_vs_parent, 3) for c in adoptions if c.speedup_vs_parent],
        "failures": [{"case": f.case_id, "operator": f.operator, "outcome": f.outcome,
                      "speedup_vs_parent": f.speedup_vs_parent} for f in failures],
        "measured": {"speedup_vs_reference": lead.case.speedup_vs_reference,
                     "speedup_vs_parent": lead.case.speedup_vs_parent},
    }  # fmt: skip


def profile_note(case: Case) -> str:
    """The first line of what the case's profile or diagnostics said, where it has one."""
    for key in PROFILE_KEYS:
        said = case.feedback.get(key)
        if isinstance(said, str) and said.strip():
            return said.strip().splitlines()[0][:PROFILE_CHARS]
    return ""


def summarize(group: list[Earned], evidence: dict[str, Any]) -> Wording:
    """The deterministic distiller: do what and the expected effect, when, and when not."""
    lead = group[0]
    where = Applicability(
        family=lead.item.family,
        shape_class="/".join(sorted({e.item.shape_class for e in group} - {""})),
        dtype="/".join(sorted({e.item.dtype for e in group} - {""})),
        target=lead.item.target,
        profile=profile_note(lead.case),
    )
    failures = [Failure(f["case"], f["operator"], f["outcome"], f["speedup_vs_parent"])
                for f in evidence["failures"]]  # fmt: skip
    return Wording(
        statement=statement_words(lead.case.strategy, evidence["speedups"]),
        applies_when=applies_words(where, evidence["operators"]),
        not_when=not_when_words(failures),
    )
