"""API tokens that expire, and read-only ones: refused saying why, chosen when they are made
(on the tokens page and over the API), and listed with both."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from apps.accounts.models import ApiToken, Team
from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from tests.factories import MembershipFactory


def bearer(issued_plaintext: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {issued_plaintext}")


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_expired_token_is_refused_saying_it_expired(user: User) -> None:
    issued = api_token_create(user=user, name="nightly", expires_in_days=7)
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    refused = bearer(issued.plaintext).get("/api/me")

    assert refused.status_code == 401
    error = refused.json()["error"]
    assert error["code"] == "token_expired"
    assert error["message"].startswith("The API token 'nightly' expired at ")
    issued.token.refresh_from_db()
    assert issued.token.last_used_at is None


def test_a_token_before_its_expiry_is_let_in(user: User) -> None:
    issued = api_token_create(user=user, name="nightly", expires_in_days=1)

    assert bearer(issued.plaintext).get("/api/me").json()["username"] == user.username


@pytest.mark.parametrize("method", ["put", "delete"])
def test_a_read_only_token_may_read_but_changes_nothing(
    team: Team, user: User, method: str
) -> None:
    MembershipFactory(user=user, team=team, role=Role.ADMIN)
    issued = api_token_create(user=user, name="dashboard", scope="read_only")
    client = bearer(issued.plaintext)

    read = client.get(f"/api/teams/{team.slug}/members")
    member_url = f"/api/teams/{team.slug}/members/{user.username}"
    refused = getattr(client, method)(member_url, {"role": "viewer"}, "application/json")

    assert read.status_code == 200
    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "code": "token_read_only",
        "message": "The API token 'dashboard' is read-only: it may send GET, HEAD or OPTIONS, "
        f"not {method.upper()}.",
    }
    assert user.memberships.get().role == Role.ADMIN


def test_a_read_only_token_cannot_make_a_token(user: User) -> None:
    issued = api_token_create(user=user, name="dashboard", scope="read_only")

    refused = bearer(issued.plaintext).post("/api/tokens", {"name": "more"},
                                            content_type="application/json")  # fmt: skip

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "token_read_only"
    assert ApiToken.objects.count() == 1


def test_the_api_makes_a_token_with_an_expiry_and_a_scope_and_lists_both(user: User) -> None:
    client = logged_in(user)

    made = client.post("/api/tokens", {"name": "ci", "expires_in_days": 30, "scope": "read_only"},
                       content_type="application/json")  # fmt: skip
    listed = client.get("/api/tokens").json()["items"]

    assert made.status_code == 201
    token = ApiToken.objects.get()
    assert token.scope == "read_only"
    assert token.expires_at is not None
    assert abs(token.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    assert listed[0]["scope"] == "read_only"
    assert listed[0]["expires_at"] == made.json()["expires_at"] is not None


def test_a_token_made_without_either_never_expires_and_may_change_things(user: User) -> None:
    made = logged_in(user).post("/api/tokens", {"name": "ci"}, content_type="application/json")

    assert (made.json()["expires_at"], made.json()["scope"]) == (None, "read_write")


@pytest.mark.parametrize("body", [{"expires_in_days": 0}, {"expires_in_days": 366},
                                  {"expires_in_days": "7"}, {"scope": "admin"}])  # fmt: skip
def test_an_expiry_or_scope_out_of_bounds_is_refused_naming_the_field(
    user: User, body: dict[str, Any]
) -> None:
    refused = logged_in(user).post("/api/tokens", {"name": "ci", **body},
                                   content_type="application/json")  # fmt: skip

    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0]["loc"][-1] == next(iter(body))
    assert not ApiToken.objects.exists()


def test_a_token_that_expires_cannot_make_one_that_outlives_it(user: User) -> None:
    issued = api_token_create(user=user, name="week", expires_in_days=7)
    client = bearer(issued.plaintext)

    never = client.post("/api/tokens", {"name": "forever"}, content_type="application/json")
    longer = client.post("/api/tokens", {"name": "month", "expires_in_days": 30},
                         content_type="application/json")  # fmt: skip
    shorter = client.post("/api/tokens", {"name": "day", "expires_in_days": 1},
                          content_type="application/json")  # fmt: skip

    assert never.status_code == longer.status_code == 400
    assert "a token it makes may not outlive it" in never.json()["error"]["message"]
    assert shorter.status_code == 201


def test_the_tokens_page_makes_a_token_with_an_expiry_and_a_scope_and_lists_both(
    user: User,
) -> None:
    client = logged_in(user)

    shown = client.post("/accounts/tokens/",
                        {"name": "ci", "expires_in_days": "90", "scope": "read_only"})  # fmt: skip

    assert shown.status_code == 200
    token = ApiToken.objects.get()
    assert token.scope == "read_only"
    assert token.expires_at is not None
    page = shown.content.decode()
    assert "<td>read only</td>" in page
    assert f"<td>{token.expires_at:%Y-%m-%d %H:%M}</td>" in page


def test_the_tokens_page_says_which_tokens_have_expired_and_which_never_do(user: User) -> None:
    api_token_create(user=user, name="forever")
    api_token_create(user=user, name="old", expires_in_days=1)
    ApiToken.objects.filter(name="old").update(expires_at=timezone.now() - timedelta(days=1))

    page = logged_in(user).get("/accounts/tokens/").content.decode()

    assert "<td>never</td>" in page
    assert "<td>expired " in page


def test_the_tokens_page_refuses_an_expiry_it_does_not_offer(user: User) -> None:
    refused = logged_in(user).post("/accounts/tokens/", {"name": "ci", "expires_in_days": "9999"})

    assert refused.status_code == 400
    assert 'id="id_expires_in_days_error"' in refused.content.decode()
    assert not ApiToken.objects.exists()
