"""The API's answer to a session's request without its CSRF token: the documented 403 code,
and what to send instead."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.models import ApiToken


def test_a_session_post_without_its_csrf_token_is_forbidden_saying_what_to_send(
    user: User,
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    refused = client.post("/api/tokens", {"name": "x"}, content_type="application/json")

    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "code": "forbidden",
        "message": "The CSRF check failed: a request with the session cookie sends the "
        "csrftoken cookie's value in an X-CSRFToken header (a script sends "
        "'Authorization: Bearer <token>' instead).",
    }
    assert not ApiToken.objects.exists()
