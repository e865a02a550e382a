from __future__ import annotations

from datetime import datetime

from ninja import Schema
from pydantic import Field

from apps.accounts.roles import Role


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


class TokenIn(Schema):
    name: str = Field(min_length=1, max_length=100)


class TokenOut(Schema):
    id: int
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class IssuedTokenOut(TokenOut):
    token: str  # shown once
