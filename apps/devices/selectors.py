"""Reading the kernels a team brought to its operators' pages, with their evaluations."""

from __future__ import annotations

from django.db.models import QuerySet

from apps.accounts.models import Team
from apps.core.errors import NotFound
from apps.devices.models import KernelTrial
from apps.operators.models import Operator


def trials_of(team: Team, operator: Operator) -> QuerySet[KernelTrial]:
    """The team's trials on any version of `operator`, newest first."""
    trials = KernelTrial.objects.filter(team=team, evaluation__version__operator=operator)
    return trials.select_related("evaluation", "evaluation__version", "created_by")


def trial_get(team: Team, operator: Operator, trial_id: int) -> KernelTrial:
    trial = trials_of(team, operator).select_related("evaluation__source").filter(pk=trial_id)
    found = trial.first()
    if found is None:
        raise NotFound(f"No evaluated kernel {trial_id} of {operator.slug} in this team.")
    return found


def trial_of_member(user_id: int, trial_id: int) -> KernelTrial | None:
    """The trial, when the user is an active member of its team (the socket's check)."""
    members = {"team__memberships__user_id": user_id,
               "team__memberships__user__is_active": True}  # fmt: skip
    trials = KernelTrial.objects.filter(pk=trial_id, **members)
    return trials.select_related("evaluation__version", "evaluation__source").first()
