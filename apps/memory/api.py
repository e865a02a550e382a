"""Rules over HTTP: the review queue for scripts, with the same role checks as the services.

No `from __future__ import annotations` here: ninja reads the parameter annotations of
@paginate-wrapped views at run time, where string annotations cannot be resolved.
"""

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.pagination import paginate

from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import NotFound
from apps.core.numbers import WholeNumber
from apps.core.pagination import LimitOffset
from apps.memory.models import Rule, RuleVersion
from apps.memory.rules import (
    MAX_COMMENT_CHARS,
    MAX_CONDITION_CHARS,
    MAX_STATEMENT_CHARS,
    Wording,
    rule_approve,
    rule_edit,
    rule_reserve,
    rule_retire,
    rule_veto,
)

router = Router(tags=["rules"])

RuleStatus = Literal["candidate", "pending", "approved", "vetoed", "retired"]


class RuleVersionOut(Schema):
    number: int
    statement: str
    applies_when: str
    not_when: str
    evidence: dict[str, Any]
    tokens: int
    created_at: datetime


class TransitionOut(Schema):
    from_status: str
    to_status: str
    version: int | None
    actor: str | None
    comment: str
    at: datetime


class RuleOut(Schema):
    id: int
    source_key: str
    status: str
    approved_version: int | None
    frequency: float
    reserved_by: str | None
    reserved_until: datetime | None
    versions: list[RuleVersionOut]
    transitions: list[TransitionOut]


class ApproveIn(Schema):
    version: WholeNumber = Field(..., ge=1)
    comment: str = Field("", max_length=MAX_COMMENT_CHARS)


class VetoIn(Schema):
    reason: str = Field(..., min_length=1, max_length=MAX_COMMENT_CHARS)


class CommentIn(Schema):
    comment: str = Field("", max_length=MAX_COMMENT_CHARS)


class EditIn(Schema):
    statement: str = Field(..., min_length=1, max_length=MAX_STATEMENT_CHARS)
    applies_when: str = Field(..., min_length=1, max_length=MAX_CONDITION_CHARS)
    not_when: str = Field("", max_length=MAX_CONDITION_CHARS)
    comment: str = Field("", max_length=MAX_COMMENT_CHARS)


def version_out(version: RuleVersion) -> dict[str, Any]:
    fields = ["number", "statement", "applies_when", "not_when", "evidence", "tokens", "created_at"]
    return {name: getattr(version, name) for name in fields}


def rule_out(rule: Rule) -> dict[str, Any]:
    transitions = [
        {"from_status": t.from_status, "to_status": t.to_status,
         "version": t.version.number if t.version else None,
         "actor": t.actor.username if t.actor else None, "comment": t.comment, "at": t.at}
        for t in rule.transitions.select_related("version", "actor")
    ]  # fmt: skip
    return {
        "id": rule.pk, "source_key": rule.source_key, "status": rule.status,
        "approved_version": rule.approved_version.number if rule.approved_version else None,
        "frequency": rule.frequency,
        "reserved_by": rule.reserved_by.username if rule.reserved_by else None,
        "reserved_until": rule.reserved_until,
        "versions": [version_out(v) for v in rule.versions.all()], "transitions": transitions,
    }  # fmt: skip


def team_rule(request: HttpRequest, slug: str, rule_id: int) -> Rule:
    team = membership_for(request.user, slug, Permission.VIEW).team
    rule = Rule.objects.filter(team=team, pk=rule_id).first()
    if rule is None:
        raise NotFound(f"No rule {rule_id}.")
    return rule


@router.get("/teams/{slug}/rules", response=list[RuleOut])
@paginate(LimitOffset)
def list_rules(request: HttpRequest, slug: str, status: RuleStatus | None = None) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    rules = Rule.objects.filter(team=team)
    if status:
        rules = rules.filter(status=status)
    return [rule_out(r) for r in rules.select_related("approved_version", "reserved_by")]


@router.get("/teams/{slug}/rules/{rule_id}", response=RuleOut)
def get_rule(request: HttpRequest, slug: str, rule_id: int) -> Any:
    return rule_out(team_rule(request, slug, rule_id))


@router.post("/teams/{slug}/rules/{rule_id}/reserve", response=RuleOut)
def reserve_rule(request: HttpRequest, slug: str, rule_id: int) -> Any:
    return rule_out(rule_reserve(rule=team_rule(request, slug, rule_id), user=request.user))


@router.post("/teams/{slug}/rules/{rule_id}/approve", response=RuleOut)
def approve_rule(request: HttpRequest, slug: str, rule_id: int, payload: ApproveIn) -> Any:
    rule = team_rule(request, slug, rule_id)
    return rule_out(rule_approve(rule=rule, user=request.user, version_number=payload.version,
                                 comment=payload.comment))  # fmt: skip


@router.post("/teams/{slug}/rules/{rule_id}/veto", response=RuleOut)
def veto_rule(request: HttpRequest, slug: str, rule_id: int, payload: VetoIn) -> Any:
    rule = team_rule(request, slug, rule_id)
    return rule_out(rule_veto(rule=rule, user=request.user, reason=payload.reason))


@router.put("/teams/{slug}/rules/{rule_id}", response=RuleOut)
def edit_rule(request: HttpRequest, slug: str, rule_id: int, payload: EditIn) -> Any:
    rule = team_rule(request, slug, rule_id)
    wording = Wording(payload.statement, payload.applies_when, payload.not_when)
    rule_edit(rule=rule, user=request.user, wording=wording, comment=payload.comment)
    rule.refresh_from_db()
    return rule_out(rule)


@router.post("/teams/{slug}/rules/{rule_id}/retire", response=RuleOut)
def retire_rule(request: HttpRequest, slug: str, rule_id: int, payload: CommentIn) -> Any:
    rule = team_rule(request, slug, rule_id)
    return rule_out(rule_retire(rule=rule, user=request.user, comment=payload.comment))
