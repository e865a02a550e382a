"""Hot memory: which approved rules are resident, the parts of each one's priority, and the
record of what entered and what was evicted, when and why.

The resident set is rebuilt from empty every time (UGC, apps/memory/learning.py); this module
remembers the last rebuilt set only through its change records: after a rule decision or a
consolidation, hot_memory_refresh diffs the set it rebuilds against the one the records say is
resident and writes one HotMemoryChange per rule that entered or left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from apps.accounts.models import Team
from apps.accounts.services import team_lock
from apps.memory.keys import rule_id_of, rule_key
from apps.memory.learning import Resident, choose_hot_memory, residence_priority
from apps.memory.models import HotMemoryChange, Rule, RuleTransition, RuleVersion
from apps.memory.selectors import shared_values

CHANGE = HotMemoryChange.Change


# --- the arithmetic of a rebuild, without the database -------------------------------------


@dataclass(frozen=True)
class Change:
    key: str
    change: str  # "entered" or "evicted"
    reason: str
    priority: float | None = None
    tokens: int | None = None


def priority_of(resident: Resident) -> float:
    return residence_priority(resident.value, resident.frequency, resident.tokens)


def hot_memory_changes(
    previous: set[str],
    candidates: Sequence[Resident],
    chosen: Sequence[Resident],
    budget: int,
    departed: Mapping[str, str],
) -> list[Change]:
    """What entered and what left between the `previous` resident keys and `chosen`, with the
    reason for each. `departed` names why a previous resident is no longer approved at all
    ("vetoed by ana: ..."); other leavers lost their place to rules with higher priority."""
    now = {r.key for r in chosen}
    by_key = {r.key: r for r in candidates}
    used = sum(r.tokens for r in chosen)
    changes = [
        Change(r.key, CHANGE.ENTERED, entered_reason(r, used, budget), priority_of(r), r.tokens)
        for r in chosen
        if r.key not in previous
    ]
    for key in sorted(previous - now, key=rule_id_of):
        resident = by_key.get(key)
        if resident is None:
            changes.append(Change(key, CHANGE.EVICTED, departed.get(key, "no longer approved")))
            continue
        reason = evicted_reason(resident, chosen, previous, budget)
        changes.append(Change(key, CHANGE.EVICTED, reason, priority_of(resident), resident.tokens))
    return changes


def entered_reason(resident: Resident, used: int, budget: int) -> str:
    return (
        f"priority {priority_of(resident):.3g} (V {resident.value:.3f} x frequency "
        f"{resident.frequency:.3f} / {resident.tokens} tokens) fits: {used:,} of {budget:,} "
        f"tokens used"
    )


def evicted_reason(
    resident: Resident, chosen: Sequence[Resident], previous: set[str], budget: int
) -> str:
    """Too long for the budget on its own, or displaced by the rules that outrank it: named is
    the lowest-ranked newcomer above it (what changed), else the lowest-ranked rule above it."""
    if resident.tokens > budget:
        return f"too long: {resident.tokens:,} tokens > the {budget:,}-token budget"
    priority = priority_of(resident)
    above = [r for r in chosen if priority_of(r) >= priority]
    newcomers = [r for r in above if r.key not in previous]
    if not above:
        return f"does not fit: priority {priority:.3g} under a {budget:,}-token budget"
    rival = (newcomers or above)[-1]
    return (
        f"displaced: priority {priority:.3g} < {priority_of(rival):.3g} of rule "
        f"{rule_id_of(rival.key)} under a {budget:,}-token budget"
    )


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """One approved rule's place in hot memory: its priority parts, and whether it is in."""

    rule: Rule
    version: RuleVersion
    value: float
    frequency: float
    tokens: int
    priority: float
    resident: bool


def hot_memory_budget(budget_tokens: int | None = None) -> int:
    return settings.KOPE_HOT_MEMORY_TOKENS if budget_tokens is None else budget_tokens


def approved_residents(team: Team) -> list[tuple[Rule, RuleVersion, Resident]]:
    """Every approved rule of the team with the numbers its priority is made of; V is the one
    value score the rule shares with its source experience, the V that ATU credits when the
    rule is adopted (selectors.value_keys)."""
    approved = Rule.objects.filter(team=team, status=Rule.Status.APPROVED).select_related(
        "approved_version"
    )
    rules = [(r, version) for r in approved if (version := r.approved_version) is not None]
    values = shared_values(rule_key(rule.pk) for rule, _ in rules)
    return [
        (rule, version, Resident(rule_key(rule.pk), values[rule_key(rule.pk)], rule.frequency,
                                 version.tokens))
        for rule, version in rules
    ]  # fmt: skip


def hot_memory_standings(team: Team, *, budget_tokens: int | None = None) -> list[Standing]:
    """Approved rules by priority, highest first; the resident ones are what the agent gets."""
    entries = approved_residents(team)
    chosen = choose_hot_memory([r for _, _, r in entries], hot_memory_budget(budget_tokens))
    order = {r.key: position for position, r in enumerate(chosen)}
    standings = [
        Standing(rule, version, r.value, r.frequency, r.tokens, priority_of(r), r.key in order)
        for rule, version, r in entries
    ]
    return sorted(standings, key=lambda s: (-s.priority, rule_key(s.rule.pk)))


def recorded_residents(team: Team) -> set[int]:
    """The rule ids the change records say are resident: those whose last change entered."""
    last = (
        HotMemoryChange.objects.filter(team=team)
        .order_by("rule_id", "-at", "-pk")
        .distinct("rule_id")
        .values_list("rule_id", "change")
    )
    return {rule_id for rule_id, change in last if change == CHANGE.ENTERED}


# --- writing ---------------------------------------------------------------------------------


@transaction.atomic
def hot_memory_refresh(
    *, team: Team, cause: str, budget_tokens: int | None = None
) -> list[HotMemoryChange]:
    """Rebuild the resident set and record how it differs from the last recorded one. One
    rebuild per team at a time (the team's row is locked), so two workers that finish a stage
    together cannot both record the same rule entering."""
    team_lock(team)
    budget = hot_memory_budget(budget_tokens)
    entries = approved_residents(team)
    candidates = [r for _, _, r in entries]
    previous = {rule_key(pk) for pk in recorded_residents(team)}
    departed = departure_reasons(team, previous - {r.key for r in candidates})
    changes = hot_memory_changes(
        previous, candidates, choose_hot_memory(candidates, budget), budget, departed
    )
    return HotMemoryChange.objects.bulk_create(
        HotMemoryChange(team=team, rule_id=rule_id_of(c.key), change=c.change, reason=c.reason,
                        cause=cause[:200], priority=c.priority, tokens=c.tokens)
        for c in changes
    )  # fmt: skip


def departure_reasons(team: Team, keys: set[str]) -> dict[str, str]:
    """Why each of these former residents is no longer approved, from its last transition."""
    rules = Rule.objects.filter(team=team, pk__in=[rule_id_of(k) for k in keys])
    reasons = {}
    for rule in rules.prefetch_related("transitions__actor"):
        last = max(rule.transitions.all(), key=lambda t: (t.at, t.pk), default=None)
        reasons[rule_key(rule.pk)] = departure_reason(rule.status, last)
    return reasons


def departure_reason(status: str, transition: RuleTransition | None) -> str:
    words = "edited: back in review" if status == Rule.Status.PENDING else str(status)
    if transition is None:
        return words
    by = f" by {transition.actor}" if transition.actor else ""
    return f"{words}{by}" + (f": {transition.comment}" if transition.comment else "")
