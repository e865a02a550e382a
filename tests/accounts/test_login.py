"""The login page: where it sends a user once logged in."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.roles import Role


@pytest.mark.parametrize("next_url", ["/accounts/login/", "/accounts/login/?next=/t/kernels/"])
def test_a_logged_in_user_whose_next_is_the_login_page_goes_home(
    client_for: Callable[[Role | str], Client], next_url: str
) -> None:
    """Django raised "Redirection loop" for such a `next`: a 500."""
    answer = client_for(Role.VIEWER).get("/accounts/login/", {"next": next_url})

    assert answer.status_code == 302 and answer["Location"] == "/"


def test_a_login_whose_next_is_the_login_page_goes_home(user: User) -> None:
    sent = Client().post("/accounts/login/?next=/accounts/login/",
                         {"username": user.username, "password": "pw-for-tests"})  # fmt: skip

    assert sent.status_code == 302 and sent["Location"] == "/"


@pytest.mark.parametrize("next_url", ["https://evil.example/", "//evil.example/", "/\\evil.x"])
def test_a_next_on_another_site_is_not_followed(
    client_for: Callable[[Role | str], Client], next_url: str
) -> None:
    answer = client_for(Role.VIEWER).get("/accounts/login/", {"next": next_url})

    assert answer.status_code == 302 and answer["Location"] == "/"
