"""A request Django cannot read (a malformed multipart body, too many fields) is a 400 that
says why: in the API's error format under /api/, on the error page elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role

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
