"""A new token's secret is shown once: the answer that holds it is never stored by a browser
or a cache, so the back button or a shared proxy cannot show it again."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_page_that_shows_a_new_token_is_never_stored(user: User) -> None:
    shown = logged_in(user).post("/accounts/tokens/", {"name": "nightly"})

    assert shown.status_code == 200 and b"kope_" in shown.content
    assert "no-store" in shown["Cache-Control"]


def test_the_api_answer_that_holds_a_new_token_is_never_stored(user: User) -> None:
    created = logged_in(user).post("/api/tokens", {"name": "nightly"},
                                   content_type="application/json")  # fmt: skip

    assert created.status_code == 201 and created.json()["token"].startswith("kope_")
    assert "no-store" in created["Cache-Control"]


def test_a_token_form_without_a_name_is_sent_back_with_400_and_makes_none(user: User) -> None:
    """It answered 200, unlike every other form the workbench sends back with what was wrong."""
    refused = logged_in(user).post("/accounts/tokens/", {"name": "   "})

    assert refused.status_code == 400
    assert "This field is required." in refused.content.decode()
    assert not user.api_tokens.exists()
