"""Login lockout (apps/accounts/lockout.py, django-axes): failed logins as one account from one
address lock that pair, failed logins from one address as any account lock the address, each
for the cool-off; the login page then says which, and for how long. API tokens are not
affected."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.services import api_token_create
from tests.factories import UserFactory

PASSWORD = "pw-for-tests"  # the factories'


@pytest.fixture(autouse=True)
def small_limits(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 5
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def log_in(username: str, password: str, address: str = "127.0.0.1") -> Any:
    return Client(REMOTE_ADDR=address).post(
        "/accounts/login/", {"username": username, "password": password}
    )


def fail(username: str, times: int, address: str = "127.0.0.1") -> Any:
    return [log_in(username, "not the password", address) for _ in range(times)][-1]


def test_failures_as_one_account_lock_it_from_that_address_saying_so_and_for_how_long(
    user: User,
) -> None:
    assert fail(user.username, 2).status_code == 200  # the form again, "Please enter a correct"

    locked = fail(user.username, 1)

    assert locked.status_code == 429
    assert 880 <= int(locked["Retry-After"]) <= 900
    page = locked.content.decode()
    assert (
        f"Too many failed logins as &#x27;{user.username}&#x27; from your address (127.0.0.1): "
        "that account is locked there; try again in 15 minutes."
    ) in page
    assert f'value="{user.username}"' in page  # the username stays filled in
    assert "Please enter a correct" not in page


def test_the_right_password_is_refused_while_the_account_is_locked(user: User) -> None:
    fail(user.username, 3)

    refused = log_in(user.username, PASSWORD)

    assert refused.status_code == 429
    assert "_auth_user_id" not in refused.wsgi_request.session


def test_a_lock_on_one_account_leaves_other_accounts_and_other_addresses_free(user: User) -> None:
    fail(user.username, 3)

    assert log_in(UserFactory().username, PASSWORD).status_code == 302
    assert log_in(user.username, PASSWORD, address="192.0.2.7").status_code == 302


def test_failures_from_one_address_as_many_accounts_lock_the_address(user: User) -> None:
    for name in ["alice", "bob", "carol", "dave"]:
        assert fail(name, 1).status_code == 200

    locked = fail("erin", 1)
    refused = log_in(user.username, PASSWORD)

    assert locked.status_code == refused.status_code == 429
    assert ("Too many failed logins from your address (127.0.0.1): logging in from it is "
            "locked; try again in 15 minutes.") in refused.content.decode()  # fmt: skip
    assert log_in(user.username, PASSWORD, address="192.0.2.7").status_code == 302


def test_a_lock_ends_once_the_cool_off_has_passed_since_the_last_failure(user: User) -> None:
    fail(user.username, 3)
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time -
                                 timedelta(minutes=15, seconds=1))  # fmt: skip

    assert log_in(user.username, PASSWORD).status_code == 302


def test_a_login_clears_that_accounts_failures_but_not_the_addresss(user: User) -> None:
    fail(user.username, 2)
    fail("someone-else", 2)

    assert log_in(user.username, PASSWORD).status_code == 302
    assert fail(user.username, 2).status_code == 200  # its own count started again
    locked = fail("a-third", 1)  # the address's fifth failure: someone-else's two were kept

    assert locked.status_code == 429
    assert "Too many failed logins from your address" in locked.content.decode()


def test_api_tokens_are_not_affected_by_a_locked_address(user: User) -> None:
    token = api_token_create(user=user, name="ci").plaintext
    fail(user.username, 5)

    answer = Client(REMOTE_ADDR="127.0.0.1").get("/api/me", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert log_in(user.username, PASSWORD).status_code == 429
    assert answer.status_code == 200 and answer.json()["username"] == user.username


def test_a_login_form_too_big_to_read_is_a_400_and_no_failure(user: User) -> None:
    fields = {f"f{i}": "1" for i in range(1001)}

    refused = Client().post("/accounts/login/", {"username": user.username, **fields})

    assert refused.status_code == 400
    assert b"The request cannot be read: it has over 1000 fields" in refused.content
    assert not AccessAttempt.objects.exists()
