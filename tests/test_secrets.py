"""A recognisable API key and secret key, planted in the settings, never come out: not in any
page or API answer (every readable endpoint of the permission matrix, as an admin), not in
the logs those requests write. Reports and prompts have their own tests
(tests/reports/test_real_session.py, tests/runs/test_claude_session.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from apps.accounts.roles import Role
from tests.test_permission_matrix import API, PAGES, Endpoint, team_objects  # noqa: F401

API_KEY = "sk-ant-api03-CANARY-never-shown-7f3a9c"
SECRET_KEY = "django-insecure-CANARY-secret-key-5b8e2d-0123456789abcdefghijklmnop"
READABLE = [e for e in PAGES + API if e.method == "get"]


@pytest.fixture
def planted(settings: Any) -> None:
    settings.ANTHROPIC_API_KEY = API_KEY
    settings.SECRET_KEY = SECRET_KEY


@pytest.mark.parametrize("endpoint", READABLE, ids=lambda e: e.path)
def test_no_page_or_answer_shows_a_secret_and_no_log_line_holds_one(
    endpoint: Endpoint,
    planted: None,
    team: Any,
    team_objects: dict[str, object],  # noqa: F811
    client_for: Callable[[Role | str], Client],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = client_for(Role.ADMIN)
    ids = {**team_objects}
    url = endpoint.url(team.slug, "nobody", **ids)
    with caplog.at_level(logging.DEBUG):
        response = client.get(url)
    assert response.status_code < 400, (url, response.status_code)
    body = response.content.decode(errors="replace")
    for secret in (API_KEY, SECRET_KEY):
        assert secret not in body, url
        assert secret[:24] not in body, url  # not even a recognisable part
        assert not any(secret in record.getMessage() for record in caplog.records), url
