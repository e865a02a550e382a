"""API authentication: a bearer token for scripts, the session (with CSRF) for the browser."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer, django_auth

from apps.accounts.selectors import user_for_token


class ApiTokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = user_for_token(token)
        if user is None:
            return None
        request.user = user
        return user


API_AUTH = [ApiTokenAuth(), django_auth]
