from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from apps.accounts.models import ApiToken, Membership, Team
from apps.accounts.roles import Permission
from apps.accounts.tokens import prefix_of, token_matches
from apps.core.errors import NotFound, PermissionDenied

AnyUser = AbstractBaseUser | AnonymousUser


def user_pk(user: AnyUser) -> int:
    """The user's id, or -1 (matching no row) for an anonymous user."""
    return int(user.pk) if user.is_authenticated and user.pk is not None else -1


def teams_for_user(user: AnyUser) -> QuerySet[Team]:
    return Team.objects.filter(memberships__user_id=user_pk(user)).order_by("name")


def memberships_for_user(user: AnyUser) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(user_id=user_pk(user))
        .select_related("team")
        .order_by("team__name")
    )


def team_members(team: Team) -> QuerySet[Membership]:
    return team.memberships.select_related("user").order_by("user__username")


def membership_for(user: AnyUser, team_slug: str, permission: Permission) -> Membership:
    """The user's membership of the team, if it grants `permission`.

    Another team's slug is NotFound, exactly like a slug that does not exist.
    """
    membership = (
        Membership.objects.select_related("team", "user")
        .filter(user_id=user_pk(user), team__slug=team_slug)
        .first()
    )
    if membership is None:
        raise NotFound(f"No team {team_slug!r}.")
    if not membership.allows(permission):
        raise PermissionDenied(
            f"Your role in {membership.team.name} is {membership.role}; "
            f"this needs the {permission} permission."
        )
    return membership


def user_has_permission_anywhere(user: AnyUser, permission: Permission) -> bool:
    return any(m.allows(permission) for m in Membership.objects.filter(user_id=user_pk(user)))


def tokens_for_user(user: AnyUser) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user_id=user_pk(user))


def token_for(plaintext: str) -> ApiToken | None:
    """The unrevoked token of an active user that `plaintext` is (expired or not)."""
    prefix = prefix_of(plaintext)
    if prefix is None:
        return None
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None or not token.is_active or not token.user.is_active:
        return None
    if not token_matches(plaintext, token.secret_hash):
        return None
    return token
