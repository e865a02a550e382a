"""Team-scoped lookups of cases and profiles: what a page or an API call may show of a team.

They return None for anything outside the team, so that each caller answers in its own terms
(a 404 page, the API's NotFound, an empty side of a comparison)."""

from __future__ import annotations

from apps.accounts.models import Team
from apps.devices.models import Profile
from apps.memory.models import Case


def team_case(team: Team, case_id: int | None) -> Case | None:
    if case_id is None:
        return None
    return (
        Case.objects.filter(session__team=team, pk=case_id)
        .select_related("source", "version__operator", "session", "parent__source")
        .first()
    )


def team_profile(team: Team, profile_id: int) -> Profile | None:
    return Profile.objects.filter(evaluation__team=team, pk=profile_id).first()
