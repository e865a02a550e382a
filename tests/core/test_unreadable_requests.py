"""A request Django cannot read (a malformed multipart body, too many fields) is a 400 that
says why: in the API's error format under /api/, on the error page elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.models import ApiToken, Team
from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from apps.runs.models import OptimizationSession
from tests.factories import MembershipFactory, TeamFactory
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

TOO_MANY_FIELDS = "&".join(f"f{i}=1" for i in range(1001))  # DATA_UPLOAD_MAX_NUMBER_FIELDS


@pytest.fixture
def admin(team: Team, client_for: Callable[[Role | str], Client]) -> Client:
    return client_for(Role.ADMIN)


def test_an_api_upload_whose_multipart_body_is_malformed_is_refused_saying_so(
    admin: Client,
) -> None:
    answer = admin.generic("POST", "/api/teams/kernels/knowledge/import", b"--x\r\n",
                           content_type="multipart/form-data")  # fmt: skip

    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "invalid",
        "message": "The request cannot be read: its multipart body is malformed "
        "(Invalid boundary in multipart: None)",
    }


@pytest.mark.parametrize("key", [{}, {"HTTP_IDEMPOTENCY_KEY": "upload-1"}])
def test_an_api_upload_with_too_many_fields_is_refused_saying_so(
    admin: Client, key: dict[str, str]
) -> None:
    fields = {f"f{i}": "1" for i in range(1001)}

    answer = admin.post("/api/teams/kernels/knowledge/import", fields, **key)  # type: ignore[arg-type]

    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "invalid",
        "message": "The request cannot be read: it has over 1000 fields",
    }


def test_an_api_query_with_too_many_fields_is_refused_saying_so(admin: Client) -> None:
    answer = admin.get(f"/api/teams?{TOO_MANY_FIELDS}")

    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "invalid",
        "message": "The request cannot be read: it has over 1000 fields",
    }


def test_a_page_with_too_many_fields_says_why_it_was_refused(admin: Client) -> None:
    answer = admin.get(f"/t/kernels/sessions/?{TOO_MANY_FIELDS}")

    assert answer.status_code == 400
    assert answer["Content-Type"].startswith("text/html")
    assert b"The request cannot be read: it has over 1000 fields" in answer.content


def test_a_page_form_over_the_size_limit_says_why_it_was_refused(
    admin: Client, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000

    answer = admin.post("/t/kernels/sessions/new/", {"label": "x" * 20_000})

    assert answer.status_code == 400
    assert b"its body is over 10000 bytes (KOPE_MAX_REQUEST_BYTES)" in answer.content


def browser_with_csrf_token(user: User) -> tuple[Client, str]:
    """A logged-in browser whose changes pass Django's CSRF check, as a page's would."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    browser.get("/accounts/tokens/")
    return browser, str(browser.cookies["csrftoken"].value)


@pytest.mark.parametrize("form", ["multipart", "urlencoded"])
@pytest.mark.parametrize("key", [{}, {"HTTP_IDEMPOTENCY_KEY": "form-1"}])
@pytest.mark.parametrize("path", ["/api/tokens", "/api/teams/kernels/sessions"])
def test_a_form_sent_by_a_browser_to_an_endpoint_that_takes_json_is_refused_saying_so(
    team: Team, form: str, key: dict[str, str], path: str
) -> None:
    """The CSRF check reads a form body from its stream, and the JSON parser then found the
    raw body gone: a 500 (RawPostDataException)."""
    user = MembershipFactory(team=team, role=Role.ADMIN).user
    browser, csrf_token = browser_with_csrf_token(user)
    fields = {"name": "ci", "csrfmiddlewaretoken": csrf_token}
    sent = (
        browser.post(path, fields, **key)  # type: ignore[arg-type]
        if form == "multipart"
        else browser.post(path, urlencode(fields), "application/x-www-form-urlencoded", **key)  # type: ignore[arg-type]
    )

    assert sent.status_code == 400
    content_type = (
        "multipart/form-data" if form == "multipart" else "application/x-www-form-urlencoded"
    )
    assert sent.json()["error"] == {
        "code": "http_400",
        "message": f"The body must be JSON (Content-Type: application/json), not {content_type}",
    }
    assert not ApiToken.objects.exists() and not OptimizationSession.objects.exists()


def test_a_malformed_upload_reaches_django_through_daphne_and_is_refused_saying_so(
    transactional_db: None,
) -> None:
    """Daphne's requests (twisted.web's) parsed a multipart body themselves before Django saw
    it, and answered one they could not parse with an empty 400 of their own."""
    team = TeamFactory(slug="live")
    token = api_token_create(user=MembershipFactory(team=team, role=Role.ADMIN).user, name="ci")
    with daphne(process_env("single-machine")) as url:
        answer = requests.post(
            f"{url}/api/teams/live/knowledge/import", data=b"--x\r\n",
            headers={"Authorization": f"Bearer {token.plaintext}",
                     "Content-Type": "multipart/form-data"}, timeout=30,
        )  # fmt: skip

    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "invalid",
        "message": "The request cannot be read: its multipart body is malformed "
        "(Invalid boundary in multipart: None)",
    }
