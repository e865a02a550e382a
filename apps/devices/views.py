"""Kernels a member brings to an operator's page: evaluate one, list them, watch a verdict."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.core.pages import page_of
from apps.devices import selectors
from apps.devices.models import Evaluation, KernelTrial
from apps.devices.services import kernel_trial_start
from apps.devices.verdicts import describe_verdict
from apps.operators.forms import KernelEvaluateForm
from apps.operators.selectors import operator_get, version_get
from apps.operators.views import operator_context

PENDING = (Evaluation.Status.QUEUED, Evaluation.Status.RUNNING)


@require_POST
@team_view(Permission.RUN)
def kernel_evaluate(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    operator = operator_get(membership.team, slug)
    form = KernelEvaluateForm(request.POST, request.FILES)
    if not form.is_valid():
        number = form.cleaned_data.get("version")
        version = version_get(operator, number if isinstance(number, int) else None)
        context = operator_context(version, membership, kernel_form=form)
        return render(request, "operators/operator_detail.html", context, status=400)
    version = version_get(operator, form.cleaned_data["version"])
    trial = kernel_trial_start(team=membership.team, user=request.user, version=version,  # type: ignore[arg-type]
                               source_text=form.cleaned_data["kernel"],
                               name=form.kernel_name)  # fmt: skip
    return redirect("kernel-trial", team=membership.team.slug, slug=slug, trial_id=trial.pk)


@team_view()
def kernel_trials(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    operator = operator_get(membership.team, slug)
    page = page_of(request, selectors.trials_of(membership.team, operator))
    context = {"section": "operators", "operator": operator, "trials": page, "page": page}
    return render(request, "devices/trial_list.html", context)


@team_view()
def kernel_trial(request: HttpRequest, membership: Membership, slug: str,
                 trial_id: int) -> HttpResponse:  # fmt: skip
    operator = operator_get(membership.team, slug)
    trial = selectors.trial_get(membership.team, operator, trial_id)
    context = {"section": "operators", "operator": operator, **trial_context(trial)}
    return render(request, "devices/trial_detail.html", context)


def trial_context(trial: KernelTrial) -> dict[str, Any]:
    """What the trial's page and its socket's updates show of the evaluation."""
    evaluation = trial.evaluation
    verdict = evaluation.verdict
    return {
        "trial": trial,
        "evaluation": evaluation,
        "pending": evaluation.status in PENDING,
        "verdict_status": str(verdict["status"]).upper() if verdict else "",
        "verdict_text": describe_verdict(verdict) if verdict else "",
    }
