from __future__ import annotations

from django.http import HttpRequest


def current_team(request: HttpRequest) -> dict[str, object]:
    """The team the page belongs to (set by team_view), for the navigation."""
    membership = getattr(request, "membership", None)
    return {"membership": membership, "team": membership.team if membership else None}
