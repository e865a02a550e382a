"""A method an API URL does not take is a 405 in the API's error format, naming the methods
it does take."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("DELETE", "/api/teams/kernels/sessions", "GET, POST"),
        ("GET", "/api/teams/kernels/rules/1/approve", "POST"),
        ("PATCH", "/api/tokens", "GET, POST"),
    ],
)
def test_a_method_the_url_does_not_take_is_a_405_naming_those_it_does(
    team: Team,
    client_for: Callable[[Role | str], Client],
    method: str,
    url: str,
    allowed: str,
) -> None:
    answer = client_for(Role.ADMIN).generic(method, url)

    assert answer.status_code == 405 and answer["Allow"] == allowed
    assert answer.json()["error"] == {
        "code": "method_not_allowed",
        "message": f"{url} does not take {method}; it takes {allowed}.",
    }


def test_a_method_not_taken_is_a_405_before_asking_who_calls(db: None) -> None:
    answer = Client().generic("PUT", "/api/me")

    assert answer.status_code == 405 and answer.json()["error"]["code"] == "method_not_allowed"
