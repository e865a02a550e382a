"""Login lockout (django-axes): per account and address, and per address, each with its own
limit, and a login page that says which is locked and for how long.

axes counts failures for each of its lockout parameters, (username, address) and address,
but compares them all with one limit; the handler below gives the address its own
(KOPE_LOGIN_ADDRESS_FAILURE_LIMIT), so one person's typos do not lock everyone behind the
same address while a guesser trying many accounts from one address is still stopped.
API tokens never go through Django's authenticate(), so they are not counted or locked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


def failures_in(attempts: QuerySet[Any]) -> int:
    return int(attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0)


class LockoutHandler(AxesDatabaseHandler):  # type: ignore[misc]
    """axes' database handler with a limit of its own for the address as a whole."""

    def account_and_address_attempts(
        self, request: HttpRequest, credentials: dict[str, Any] | None
    ) -> tuple[QuerySet[Any], QuerySet[Any]]:
        """The recent failures as this account from this address, and from this address as any
        account (AXES_LOCKOUT_PARAMETERS, in that order)."""
        account, address = self.get_user_attempts(request, credentials)
        return account, address

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        """What axes compares with AXES_FAILURE_LIMIT: the account's failures from this address,
        raised to that limit once the address as a whole is over its own."""
        account, address = self.account_and_address_attempts(request, credentials)
        if failures_in(address) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(failures_in(account), settings.AXES_FAILURE_LIMIT)
        return failures_in(account)

    def reset_user_attempts(
        self, request: HttpRequest, credentials: dict[str, Any] | None = None
    ) -> int:
        """A login clears the failures as that account from that address only: one account
        that works must not clear what was tried against the others."""
        account, _ = self.account_and_address_attempts(request, credentials)
        deleted, _ = account.delete()
        return int(deleted)


@dataclass(frozen=True)
class Lockout:
    username: str
    address: str
    whole_address: bool  # the address as a whole is locked, not one account from it
    ends_at: datetime

    def seconds_left(self, now: datetime) -> int:
        return max(1, math.ceil((self.ends_at - now).total_seconds()))

    def message(self, now: datetime) -> str:
        minutes = math.ceil(self.seconds_left(now) / 60)
        wait = f"try again in {minutes} minute{'s' if minutes != 1 else ''}"
        if self.whole_address:
            return (f"Too many failed logins from your address ({self.address}): logging in "
                    f"from it is locked; {wait}.")  # fmt: skip
        return (f"Too many failed logins as {self.username!r} from your address "
                f"({self.address}): that account is locked there; {wait}.")  # fmt: skip


def lockout_of(request: HttpRequest, credentials: dict[str, Any] | None) -> Lockout:
    """What is locked for this request (which axes has found locked), and until when: the
    cool-off runs from the last failure of the set that is over its limit."""
    account, address = LockoutHandler().account_and_address_attempts(request, credentials)
    whole_address = failures_in(address) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT
    locked = address if whole_address else account
    last_failure = locked.aggregate(last=Max("attempt_time"))["last"] or timezone.now()
    return Lockout(
        username=get_client_username(request, credentials) or "",
        address=getattr(request, "axes_ip_address", None) or "unknown",
        whole_address=whole_address,
        ends_at=last_failure + get_cool_off(request),
    )


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """The login page again (AXES_LOCKOUT_CALLABLE), 429 with Retry-After, saying what is
    locked and for how long; the username stays filled in."""
    lockout = lockout_of(request, credentials)
    now = timezone.now()
    form = AuthenticationForm(request, initial={"username": lockout.username})
    context = {"form": form, "lockout": lockout.message(now), "next": request.POST.get("next", "")}
    response = render(request, "registration/login.html", context, status=429)
    response["Retry-After"] = str(lockout.seconds_left(now))
    return response
