"""Page access: resolve the team from the URL and check the user's role in it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec

from django.http import HttpRequest, HttpResponse

from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for

P = ParamSpec("P")
TeamView = Callable[Concatenate[HttpRequest, Membership, P], HttpResponse]


def team_view(
    permission: Permission = Permission.VIEW,
) -> Callable[[TeamView[P]], Callable[..., HttpResponse]]:
    """Pass the caller's membership of the URL's team to the view, or 404/403 (via DomainError)."""

    def decorate(view: TeamView[P]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, team: str, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = membership_for(request.user, team, permission)
            request.membership = membership  # type: ignore[attr-defined]
            return view(request, membership, *args, **kwargs)

        return wrapper

    return decorate
