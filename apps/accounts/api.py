from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers
from ninja import Router, Status
from ninja.pagination import paginate

from apps.accounts import selectors, services
from apps.accounts.idempotency import answer_never_kept
from apps.accounts.models import ApiToken, Membership
from apps.accounts.roles import Permission
from apps.accounts.schemas import (
    IssuedTokenOut,
    MemberIn,
    MemberOut,
    TeamOut,
    TokenIn,
    TokenOut,
    UserOut,
)
from apps.core.pagination import LimitOffset

router = Router(tags=["accounts"])


def team_out(membership: Membership) -> dict[str, Any]:
    return {"slug": membership.team.slug, "name": membership.team.name, "role": membership.role}


def member_out(membership: Membership) -> dict[str, Any]:
    return {"username": membership.user.username, "role": membership.role}


def token_out(token: ApiToken) -> dict[str, Any]:
    fields = ["id", "name", "prefix", "scope", "created_at", "expires_at", "last_used_at",
              "revoked_at"]  # fmt: skip
    return {name: getattr(token, name) for name in fields}


@router.get("/me", response=UserOut)
def get_me(request: HttpRequest) -> Any:
    return request.user


@router.get("/teams", response=list[TeamOut])
@paginate(LimitOffset)
def list_teams(request: HttpRequest) -> Any:
    return [team_out(m) for m in selectors.memberships_for_user(request.user)]


@router.get("/teams/{slug}", response=TeamOut)
def get_team(request: HttpRequest, slug: str) -> Any:
    return team_out(selectors.membership_for(request.user, slug, Permission.VIEW))


@router.get("/teams/{slug}/members", response=list[MemberOut])
@paginate(LimitOffset)
def list_members(request: HttpRequest, slug: str) -> Any:
    membership = selectors.membership_for(request.user, slug, Permission.VIEW)
    return [member_out(m) for m in selectors.team_members(membership.team)]


@router.put("/teams/{slug}/members/{username}", response=MemberOut)
def set_member(request: HttpRequest, slug: str, username: str, payload: MemberIn) -> Any:
    membership = selectors.membership_for(request.user, slug, Permission.MANAGE)
    changed = services.membership_set(team=membership.team, username=username, role=payload.role)
    return member_out(changed)


@router.delete("/teams/{slug}/members/{username}", response={204: None})
def remove_member(request: HttpRequest, slug: str, username: str) -> Any:
    membership = selectors.membership_for(request.user, slug, Permission.MANAGE)
    services.membership_remove(team=membership.team, username=username)
    return Status(204, None)


@router.get("/tokens", response=list[TokenOut])
@paginate(LimitOffset)
def list_tokens(request: HttpRequest) -> Any:
    return [token_out(t) for t in selectors.tokens_for_user(request.user)]


@router.post("/tokens", response={201: IssuedTokenOut})
@answer_never_kept("its answer holds the token's secret, which is stored only as a hash")
def create_token(request: HttpRequest, payload: TokenIn, response: HttpResponse) -> Any:
    made_with = request.auth if isinstance(request.auth, ApiToken) else None  # type: ignore[attr-defined]
    issued = services.api_token_create(
        user=request.user, name=payload.name, expires_in_days=payload.expires_in_days,  # type: ignore[arg-type]
        scope=payload.scope, made_with=made_with,
    )  # fmt: skip
    add_never_cache_headers(response)  # the secret is shown once: no cache may keep it
    return Status(201, {**token_out(issued.token), "token": issued.plaintext})


@router.delete("/tokens/{token_id}", response=TokenOut)
def revoke_token(request: HttpRequest, token_id: int) -> Any:
    return token_out(services.api_token_revoke(user=request.user, token_id=token_id))  # type: ignore[arg-type]
