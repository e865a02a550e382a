"""API authentication: a bearer token for scripts, the session (with CSRF) for the browser."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer, django_auth

from apps.accounts.models import ApiToken
from apps.accounts.selectors import token_for
from apps.accounts.services import api_token_used
from apps.core.errors import PermissionDenied, Unauthenticated


class ApiTokenAuth(HttpBearer):
    """A token that is not one (unknown, revoked) leaves the request unauthenticated (401); an
    expired one, or a read-only one sent with a change, is refused saying so."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = token_for(token)
        if found is None:
            return None
        refuse_if_not_allowed(found, request.method or "")
        api_token_used(token=found)
        request.user = found.user
        return found


def refuse_if_not_allowed(token: ApiToken, method: str) -> None:
    if token.is_expired:
        expired_at = f"{token.expires_at:%Y-%m-%d %H:%M} UTC"
        raise Unauthenticated(
            f"The API token {token.name!r} expired at {expired_at}; create a new one.",
            code="token_expired",
        )
    if not token.allows_method(method):
        raise PermissionDenied(
            f"The API token {token.name!r} is read-only: it may send GET, HEAD or OPTIONS, "
            f"not {method}.",
            code="token_read_only",
        )


API_AUTH = [ApiTokenAuth(), django_auth]
