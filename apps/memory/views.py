"""Review pages: the queue of rule candidates, one rule with its evidence, and the decisions.

Opening a rule as a reviewer reserves it for a few minutes (rule_reserve), so two reviewers
never work the same item unknowingly; the decisions go through the same services as the API,
which check the role.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.core.errors import Conflict, DomainError
from apps.core.pages import page_of
from apps.memory.keys import id_in_key
from apps.memory.models import MemoryVector, Rule, RuleTransition
from apps.memory.rules import (
    Wording,
    hot_memory,
    rule_approve,
    rule_edit,
    rule_edit_and_approve,
    rule_reserve,
    rule_retire,
    rule_veto,
)
from apps.memory.selectors import rule_sources
from apps.memory.values import value_history

STATUSES = ("pending", "approved", "vetoed", "retired", "all")


@team_view()
def review_queue(request: HttpRequest, membership: Membership) -> HttpResponse:
    status = request.GET.get("status", "pending")
    if status not in STATUSES:
        status = "pending"
    rules = Rule.objects.filter(team=membership.team).prefetch_related("versions")
    if status != "all":
        rules = rules.filter(status=status)
    resident = hot_memory(membership.team)
    page = page_of(request, rules.select_related("reserved_by").order_by("-created_at", "-pk"))
    context = {
        "section": "review", "status": status, "statuses": STATUSES, "page": page,
        "rules": [rule_card(rule) for rule in page],
        "can_review": membership.allows(Permission.REVIEW),
        "resident": resident, "budget": settings.KOPE_HOT_MEMORY_TOKENS,
        "resident_tokens": sum(v.tokens for v in resident),
    }  # fmt: skip
    return render(request, "memory/review_queue.html", context)


def rule_card(rule: Rule) -> dict[str, Any]:
    latest = max(rule.versions.all(), key=lambda v: v.number, default=None)
    return {"rule": rule, "version": latest}


def team_rule(membership: Membership, rule_id: int) -> Rule:
    rule = Rule.objects.filter(team=membership.team, pk=rule_id).first()
    if rule is None:
        raise Http404(f"No rule {rule_id}.")
    return rule


@team_view()
def rule_detail(request: HttpRequest, membership: Membership, rule_id: int) -> HttpResponse:
    rule = team_rule(membership, rule_id)
    can_review = membership.allows(Permission.REVIEW)
    reserved_note = ""
    if can_review and rule.status == Rule.Status.PENDING:
        try:
            rule = rule_reserve(rule=rule, user=request.user)
        except Conflict as held:
            reserved_note = str(held)
    return rule_page(request, rule, can_review=can_review, reserved_note=reserved_note)


def rule_page(request: HttpRequest, rule: Rule, *, can_review: bool, reserved_note: str = "",
              draft: dict[str, str] | None = None, status: int = 200) -> HttpResponse:  # fmt: skip
    """The rule's page; `draft` is an edit that was not saved, shown again in the edit form."""
    versions = list(rule.versions.order_by("-number"))
    latest = versions[0]
    source = MemoryVector.objects.filter(key=rule.source_key).first()
    history = value_history(rule.source_key)
    # The edit form starts from the newest wording, or from the draft it was sent back with.
    edit = draft or {"statement": latest.statement, "applies_when": latest.applies_when,
                     "not_when": latest.not_when, "comment": ""}  # fmt: skip
    context = {
        "section": "review", "rule": rule, "versions": versions, "latest": latest,
        "source": source, "history": history, "sparkline": sparkline(history),
        "evidence": evidence_links(rule, latest.evidence),
        "transitions": rule.transitions.select_related("actor", "version"),
        "decided": last_decision(rule),
        "can_review": can_review, "reserved_note": reserved_note, "draft": draft, "edit": edit,
    }  # fmt: skip
    return render(request, "memory/rule_detail.html", context, status=status)


def last_decision(rule: Rule) -> RuleTransition | None:
    """Why a vetoed or retired rule is where it is, shown by its status."""
    if rule.status not in (Rule.Status.VETOED, Rule.Status.RETIRED):
        return None
    return rule.transitions.filter(to_status=rule.status).select_related("actor").last()


def evidence_links(rule: Rule, evidence: dict[str, Any]) -> dict[str, Any]:
    """The evidence's keys as case ids the page links to: every source experience, the
    adoptions that improved and the failures of the same strategy."""
    sources = [(key, id_in_key(key, "case")) for key in rule_sources(rule, evidence)]
    return {
        "sources": [{"key": key, "case": case} for key, case in sources],
        "adoptions": [n for n in evidence.get("adoption_cases", []) if isinstance(n, int)],
        "failures": [f for f in evidence.get("failures", [])
                     if isinstance(f, dict) and isinstance(f.get("case"), int)],
    }  # fmt: skip


def sparkline(history: list[dict[str, Any]], width: int = 240, height: int = 48) -> str:
    """The value history as SVG polyline points (V in [-0.1, 1] mapped to the height)."""
    values = [0.0, *(h["new"] for h in history)]
    if len(values) < 2:
        return ""
    step = width / (len(values) - 1)
    points = [
        f"{i * step:.1f},{height - (v + 0.1) / 1.1 * height:.1f}" for i, v in enumerate(values)
    ]
    return " ".join(points)


def edit_draft(post: Any) -> dict[str, str]:
    return {name: post.get(name, "") for name in ("statement", "applies_when", "not_when",
                                                  "comment")}  # fmt: skip


def approve(rule: Rule, user: Any, post: Any, draft: dict[str, str]) -> str:
    rule_approve(rule=rule, user=user, version_number=int(post["version"]),
                 comment=post.get("comment", ""))  # fmt: skip
    return f"Rule {rule.pk} approved."


def veto(rule: Rule, user: Any, post: Any, draft: dict[str, str]) -> str:
    rule_veto(rule=rule, user=user, reason=post.get("reason", ""))
    return f"Rule {rule.pk} vetoed."


def retire(rule: Rule, user: Any, post: Any, draft: dict[str, str]) -> str:
    """From the page a retirement needs a reason, kept in the rule's history like a veto's."""
    reason = post.get("reason", "").strip()
    if not reason:
        raise DomainError("a retirement needs a reason")
    rule_retire(rule=rule, user=user, comment=reason)
    return f"Rule {rule.pk} retired."


def edit(rule: Rule, user: Any, post: Any, draft: dict[str, str]) -> str:
    """A new version, pending review, or approved at once when the form asks ("then")."""
    wording = Wording(draft["statement"], draft["applies_when"], draft["not_when"])
    save = rule_edit_and_approve if post.get("then") == "approve" else rule_edit
    version = save(rule=rule, user=user, wording=wording, comment=draft["comment"])
    return f"Rule {rule.pk}: version {version.number} saved."


DECISIONS = {"approve": approve, "veto": veto, "retire": retire, "edit": edit}


@require_POST
@team_view(Permission.REVIEW)
def rule_decide(
    request: HttpRequest, membership: Membership, rule_id: int, action: str
) -> HttpResponse:
    rule = team_rule(membership, rule_id)
    post = request.POST
    draft = edit_draft(post)
    try:
        decide = DECISIONS.get(action)
        if decide is None:
            raise Http404(f"No action {action!r}.")
        messages.success(request, decide(rule, request.user, post, draft))
    except (DomainError, KeyError, ValueError) as error:
        messages.error(request, str(error) if isinstance(error, DomainError) else
                       "The form was incomplete: a version number is needed.")  # fmt: skip
        # An edit's wording is shown again, not lost; an approval that met a newer version
        # (or another reviewer) shows the rule as it is now, with why nothing was approved.
        if action == "edit" or (action == "approve" and isinstance(error, Conflict)):
            status = error.status if isinstance(error, DomainError) else 400
            return rule_page(request, Rule.objects.get(pk=rule.pk), can_review=True,
                             draft=draft if action == "edit" else None, status=status)  # fmt: skip
        return redirect("rule", team=membership.team.slug, rule_id=rule.pk)
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, {request.get_host()}):
        back = reverse("review", kwargs={"team": membership.team.slug})
    return redirect(back)
