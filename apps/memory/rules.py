"""Rules and the human gate to hot memory.

Only reviewers and admins approve, veto, edit or retire a rule: the check is here, in the
service layer, so pages, the API and scripts all obey it. Every transition is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.accounts.models import Team
from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import Conflict, DomainError
from apps.core.tokens import count_tokens
from apps.memory.hot import hot_memory_refresh, hot_memory_standings
from apps.memory.learning import initial_frequency
from apps.memory.models import MemoryVector, Rule, RuleTransition, RuleVersion
from apps.memory.selectors import retrieval_record
from apps.memory.tasks import embed_rule_after_commit

RESERVATION = timedelta(minutes=5)
# What a reviewer may write (pages and the API alike; the API's schemas state the same).
MAX_STATEMENT_CHARS = 4000
MAX_CONDITION_CHARS = 2000
MAX_COMMENT_CHARS = 2000

AnyUser = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class Wording:
    statement: str
    applies_when: str
    not_when: str = ""

    def check(self) -> None:
        if not self.statement.strip() or not self.applies_when.strip():
            raise DomainError("a rule needs a statement and the conditions it applies under")
        if "\x00" in self.statement + self.applies_when + self.not_when:
            raise DomainError("a rule's wording cannot hold a NUL character")

    def check_edit(self) -> None:
        """A reviewer's wording also keeps within the stated lengths."""
        self.check()
        for name, text, limit in (("statement", self.statement, MAX_STATEMENT_CHARS),
                                  ("applies when", self.applies_when, MAX_CONDITION_CHARS),
                                  ("not when", self.not_when, MAX_CONDITION_CHARS)):  # fmt: skip
            if len(text.strip()) > limit:
                raise DomainError(
                    f"the {name} text is {len(text.strip())} characters; the limit is {limit}"
                )

    def as_text(self) -> str:
        parts = [self.statement.strip(), f"Applies when: {self.applies_when.strip()}"]
        if self.not_when.strip():
            parts.append(f"Not when: {self.not_when.strip()}")
        return "\n".join(parts)


def require_reviewer(user: AnyUser, team: Team) -> None:
    """PermissionDenied (or NotFound for an outsider) unless the user may review rules."""
    membership_for(user, team.slug, Permission.REVIEW)


def _transition(rule: Rule, to_status: str, *, actor: Any, version: RuleVersion | None,
                comment: str = "") -> None:  # fmt: skip
    if len(comment) > MAX_COMMENT_CHARS or "\x00" in comment:
        raise DomainError(
            f"a comment is at most {MAX_COMMENT_CHARS} characters, without NUL characters"
        )
    RuleTransition.objects.create(rule=rule, version=version, from_status=rule.status,
                                  to_status=to_status, actor=actor, comment=comment)  # fmt: skip
    rule.status = to_status


def _new_version(rule: Rule, wording: Wording, evidence: dict[str, Any], actor: Any) -> RuleVersion:
    wording.check()
    number = (rule.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    return RuleVersion.objects.create(
        rule=rule, number=number, statement=wording.statement.strip(),
        applies_when=wording.applies_when.strip(), not_when=wording.not_when.strip(),
        evidence=evidence, tokens=count_tokens(wording.as_text()), created_by=actor,
    )  # fmt: skip


@transaction.atomic
def rule_propose(
    *, team: Team, source_key: str, wording: Wording, evidence: dict[str, Any]
) -> Rule:
    """A candidate from consolidation, put up for review, with its cold-phase access frequency.
    A source that already has a rule keeps it: a vetoed rule is never proposed again."""
    # get_or_create: a proposal of the same source committed meanwhile (two workers
    # consolidating, two imports of one file) is returned instead of an IntegrityError.
    rule, created = Rule.objects.get_or_create(team=team, source_key=source_key)
    if not created:
        return rule
    rule.frequency = cold_phase_frequency(team, source_key)
    version = _new_version(rule, wording, evidence, None)
    RuleTransition.objects.create(rule=rule, version=version, to_status=Rule.Status.CANDIDATE)
    _transition(rule, Rule.Status.PENDING, actor=None, version=version,
                comment="proposed by consolidation")  # fmt: skip
    rule.save(update_fields=["status", "frequency"])
    embed_rule_after_commit(rule.pk)
    return rule


def cold_phase_frequency(team: Team, source_key: str) -> float:
    """SAGE's access-frequency estimate before a rule has been resident: the share of the
    eligible stages its source experience was retrieved in (0.0 with no stage on record)."""
    source = MemoryVector.objects.filter(key=source_key).first()
    if source is None:
        return 0.0
    retrieved, eligible = retrieval_record(team, source)
    return min(1.0, initial_frequency(retrieved, eligible))


def _locked(rule: Rule, user: AnyUser) -> Rule:
    locked = Rule.objects.select_for_update().select_related("team").get(pk=rule.pk)
    require_reviewer(user, locked.team)
    held_by_other = locked.reserved_by_id not in (None, user.pk)
    if held_by_other and locked.reserved_until and locked.reserved_until > timezone.now():
        raise Conflict(f"{locked.reserved_by} is reviewing this rule until "
                       f"{locked.reserved_until:%H:%M:%S}")  # fmt: skip
    return locked


@transaction.atomic
def rule_reserve(*, rule: Rule, user: AnyUser) -> Rule:
    """Whoever opens a rule for review holds it for a few minutes; a second reviewer is told."""
    locked = _locked(rule, user)
    locked.reserved_by_id, locked.reserved_until = user.pk, timezone.now() + RESERVATION
    locked.save(update_fields=["reserved_by", "reserved_until"])
    return locked


@transaction.atomic
def rule_approve(*, rule: Rule, user: AnyUser, version_number: int, comment: str = "") -> Rule:
    locked = _locked(rule, user)
    if locked.status not in (Rule.Status.PENDING, Rule.Status.APPROVED):
        raise Conflict(f"a {locked.status} rule cannot be approved")
    require_never_vetoed(locked)
    version = locked.versions.filter(number=version_number).first()
    if version is None:
        raise DomainError(f"rule {locked.pk} has no version {version_number}")
    require_newest(locked, version)
    if locked.status == Rule.Status.APPROVED and locked.approved_version_id == version.pk:
        return locked  # approved as asked already: a second reviewer's click changes nothing
    _transition(locked, Rule.Status.APPROVED, actor=user, version=version, comment=comment)
    locked.approved_version = version
    locked.reserved_by, locked.reserved_until = None, None
    locked.save(update_fields=["status", "approved_version", "reserved_by", "reserved_until"])
    decided(locked, f"rule {locked.pk} v{version.number} approved by {user}")
    return locked


def require_newest(rule: Rule, version: RuleVersion) -> None:
    """Approval is of the newest version: approving an older one from a page or a script that
    had not seen a later edit would silently throw that edit away."""
    newest = rule.versions.aggregate(n=Max("number"))["n"]
    if newest is not None and version.number != newest:
        raise Conflict(
            f"the approval was of version {version.number} of rule {rule.pk}, but version "
            f"{newest} was added since: read its changes and approve that one; nothing was "
            "approved"
        )


def require_never_vetoed(rule: Rule) -> None:
    """A veto sticks: a rule that was ever vetoed is never edited or approved back into hot
    memory, whatever its status says now."""
    if rule.transitions.filter(to_status=Rule.Status.VETOED).exists():
        raise Conflict(f"rule {rule.pk} was vetoed: a vetoed rule never goes back into review")


@transaction.atomic
def rule_veto(*, rule: Rule, user: AnyUser, reason: str) -> Rule:
    """Vetoed rules keep their evidence and the reason; they never reach hot memory again."""
    if not reason.strip():
        raise DomainError("a veto needs a reason")
    locked = _locked(rule, user)
    if locked.status in (Rule.Status.VETOED, Rule.Status.RETIRED):
        raise Conflict(f"the rule is already {locked.status}")
    _transition(locked, Rule.Status.VETOED, actor=user, version=None, comment=reason.strip())
    locked.approved_version = None
    locked.reserved_by, locked.reserved_until = None, None
    locked.save(update_fields=["status", "approved_version", "reserved_by", "reserved_until"])
    decided(locked, f"rule {locked.pk} vetoed by {user}")
    return locked


@transaction.atomic
def rule_edit(*, rule: Rule, user: AnyUser, wording: Wording, comment: str = "") -> RuleVersion:
    """A new immutable version; the rule goes back to review (approval is of a version)."""
    locked = _locked(rule, user)
    if locked.status == Rule.Status.VETOED:
        raise Conflict("a vetoed rule cannot be edited back into review")
    require_never_vetoed(locked)
    wording.check_edit()
    latest = locked.versions.order_by("-number").first()
    version = _new_version(locked, wording, latest.evidence if latest else {}, user)
    _transition(locked, Rule.Status.PENDING, actor=user, version=version, comment=comment)
    locked.save(update_fields=["status"])
    decided(locked, f"rule {locked.pk} edited to v{version.number} by {user}")
    return version


@transaction.atomic
def rule_edit_and_approve(
    *, rule: Rule, user: AnyUser, wording: Wording, comment: str = ""
) -> RuleVersion:
    """One transaction, so no other decision lands between the two: the reviewer's edit is
    approved, or nothing is written."""
    version = rule_edit(rule=rule, user=user, wording=wording, comment=comment)
    rule_approve(rule=rule, user=user, version_number=version.number)
    return version


@transaction.atomic
def rule_retire(*, rule: Rule, user: AnyUser, comment: str = "") -> Rule:
    """An approved or pending rule leaves review and hot memory. A vetoed rule stays vetoed:
    retired, it could be edited back into review and approved."""
    locked = _locked(rule, user)
    if locked.status == Rule.Status.VETOED:
        raise Conflict("a vetoed rule stays vetoed: it cannot be retired")
    if locked.status == Rule.Status.RETIRED:
        raise Conflict("the rule is already retired")
    _transition(locked, Rule.Status.RETIRED, actor=user, version=None, comment=comment)
    locked.save(update_fields=["status"])
    decided(locked, f"rule {locked.pk} retired by {user}")
    return locked


def decided(rule: Rule, cause: str) -> None:
    """After a decision: the rule's searchable wording and the hot memory it may enter or
    leave follow it."""
    embed_rule_after_commit(rule.pk)
    hot_memory_refresh(team=rule.team, cause=cause)


def hot_memory(team: Team, *, budget_tokens: int | None = None) -> list[RuleVersion]:
    """Rebuilt from empty: approved rules by V x frequency / tokens, greedily under the budget.
    Only approved versions take part, so a vetoed or pending rule never enters."""
    standings = hot_memory_standings(team, budget_tokens=budget_tokens)
    return [s.version for s in standings if s.resident]
