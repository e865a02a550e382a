from __future__ import annotations

from datetime import datetime
from typing import Literal

from ninja import Schema
from pydantic import Field

from apps.accounts.roles import Role
from apps.accounts.services import MAX_TOKEN_DAYS
from apps.core.numbers import WholeNumber


class UserOut(Schema):
    id: int
    username: str
    is_staff: bool


class TeamOut(Schema):
    slug: str
    name: str
    role: Role


class MemberOut(Schema):
    username: str
    role: Role


class MemberIn(Schema):
    role: Role


TokenScope = Literal["read_write", "read_only"]


class TokenIn(Schema):
    name: str = Field(min_length=1, max_length=100)
    expires_in_days: WholeNumber | None = Field(
        None, ge=1, le=MAX_TOKEN_DAYS, description="null or left out: the token never expires"
    )
    scope: TokenScope = Field(
        "read_write", description="read_only: the token may send GET, HEAD and OPTIONS only"
    )


class TokenOut(Schema):
    id: int
    name: str
    prefix: str
    scope: TokenScope
    created_at: datetime
    expires_at: datetime | None = Field(..., description="null: never")
    last_used_at: datetime | None
    revoked_at: datetime | None


class IssuedTokenOut(TokenOut):
    token: str  # shown once
