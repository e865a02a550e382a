from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import NamedTuple

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.accounts.models import ApiToken, Membership, Team
from apps.accounts.roles import Role
from apps.accounts.tokens import make_token
from apps.core.errors import Conflict, DomainError, NotFound

DEFAULT_TEAM_NAME = "Default team"


@transaction.atomic
def team_create(*, name: str, owner: User, slug: str = "") -> Team:
    slug = slug or slugify(name)
    if not slug:
        raise DomainError("A team needs a name with at least one letter or digit.")
    taken = Conflict(f"A team with the slug {slug!r} already exists.")
    if Team.objects.filter(slug=slug).exists():
        raise taken
    try:
        with transaction.atomic():  # one created at the same moment: its insert wins
            team = Team.objects.create(name=name, slug=slug)
    except IntegrityError as error:
        raise taken from error
    Membership.objects.create(team=team, user=owner, role=Role.ADMIN)
    return team


@transaction.atomic
def membership_set(*, team: Team, username: str, role: str) -> Membership:
    """Add a user to the team, or change their role."""
    if role not in {r.value for r in Role}:
        raise DomainError(f"Unknown role {role!r}; use one of {', '.join(Role)}.")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound(f"No user {username!r}.")
    # One change to a team's members at a time, so the check that an admin remains sees the
    # other's change: two admins demoted or removed at once otherwise lock each other's rows
    # and PostgreSQL kills one request (a deadlock) instead of refusing it.
    team_lock(team)
    membership, _ = Membership.objects.update_or_create(
        team=team, user=user, defaults={"role": role}
    )
    _ensure_an_admin_remains(team)
    return membership


@transaction.atomic
def membership_remove(*, team: Team, username: str) -> None:
    team_lock(team)  # as in membership_set
    deleted, _ = Membership.objects.filter(team=team, user__username=username).delete()
    if not deleted:
        raise NotFound(f"{username!r} is not a member of {team.name}.")
    _ensure_an_admin_remains(team)


def team_lock(team: Team) -> None:
    """Hold the team's row until the transaction ends: what must happen one at a time per team
    takes it (member changes, hot-memory rebuilds, knowledge imports)."""
    Team.objects.select_for_update().filter(pk=team.pk).first()


def _ensure_an_admin_remains(team: Team) -> None:
    # Runs inside the caller's transaction, after team_lock, so raising rolls the
    # change back.
    if not Membership.objects.filter(team=team, role=Role.ADMIN).exists():
        raise Conflict(f"{team.name} must keep at least one admin.")


class IssuedToken(NamedTuple):
    token: ApiToken
    plaintext: str  # shown once, never stored


# The longest a token may be made to last, when it is to expire at all.
MAX_TOKEN_DAYS = 365


def api_token_create(
    *, user: User, name: str, expires_in_days: int | None = None,
    scope: str = ApiToken.Scope.READ_WRITE, made_with: ApiToken | None = None,
) -> IssuedToken:  # fmt: skip
    """A new token; `made_with` is the token the request came with, if one: the new token
    may not outlive it (a token that expires cannot make one that never does)."""
    name = name.strip()
    if not name or len(name) > 100:
        raise DomainError("A token needs a name of 1 to 100 characters.")
    if scope not in ApiToken.Scope.values:
        scopes = ", ".join(ApiToken.Scope.values)
        raise DomainError(f"Unknown token scope {scope!r}; use one of {scopes}.")
    expires_at = token_expiry(expires_in_days)
    refuse_outliving(expires_at, made_with)
    new = make_token()
    token = ApiToken.objects.create(
        user=user, name=name, prefix=new.prefix, secret_hash=new.secret_hash,
        scope=scope, expires_at=expires_at,
    )  # fmt: skip
    return IssuedToken(token, new.plaintext)


def refuse_outliving(expires_at: datetime | None, made_with: ApiToken | None) -> None:
    """A new token expiring at `expires_at` (None: never) may not outlive the one it is made
    with."""
    limit = made_with.expires_at if made_with is not None else None
    if limit is not None and (expires_at is None or expires_at > limit):
        raise DomainError(f"This request's token expires at {limit:%Y-%m-%d %H:%M} UTC; "
                          "a token it makes may not outlive it.")  # fmt: skip


def token_expiry(days: int | None) -> datetime | None:
    if days is None:
        return None
    if isinstance(days, bool) or not 1 <= days <= MAX_TOKEN_DAYS:
        raise DomainError(f"A token expires in 1 to {MAX_TOKEN_DAYS} days, or never; "
                          f"got {days!r}.")  # fmt: skip
    return timezone.now() + timedelta(days=days)


def api_token_used(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())


@transaction.atomic
def api_token_revoke(*, user: User, token_id: int) -> ApiToken:
    """Revoking a revoked token changes nothing: the first revocation's time stays."""
    token = ApiToken.objects.select_for_update().filter(pk=token_id, user_id=user.pk).first()
    if token is None:
        raise NotFound(f"No token {token_id}.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


class BootstrappedAdmin(NamedTuple):
    username: str
    created: bool
    password: str | None  # set only when this call chose or set it


@transaction.atomic
def admin_bootstrap(*, username: str, password: str = "") -> BootstrappedAdmin:
    """Create the first admin and the default team, once; safe to call at every start. A
    given password is set only when it is not the admin's already: setting it anew (a fresh
    salt) would sign the admin out of every browser at each restart."""
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    created = user is None
    chosen = password or (secrets.token_urlsafe(12) if created else "")
    changed = False
    if user is None:
        user = user_model.objects.create_superuser(username=username, password=chosen)
    elif password and not user.check_password(password):
        user.set_password(password)
        user.save(update_fields=["password"])
        changed = True
    if not Membership.objects.filter(user=user).exists():
        team_create(name=DEFAULT_TEAM_NAME, owner=user, slug=_free_slug("default"))
    return BootstrappedAdmin(username, created, chosen if created or changed else None)


def _free_slug(base: str) -> str:
    slug, n = base, 1
    while Team.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug
