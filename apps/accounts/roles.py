"""Roles and what each may do: a pure table, tested without a database."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"
    ENGINEER = "engineer"
    REVIEWER = "reviewer"
    ADMIN = "admin"


class Permission(StrEnum):
    VIEW = "view"  # read everything the team owns
    RUN = "run"  # launch and control sessions, check workers
    REVIEW = "review"  # approve, veto and edit rules
    MANAGE = "manage"  # members and roles


ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: frozenset({Permission.VIEW}),
    Role.ENGINEER: frozenset({Permission.VIEW, Permission.RUN}),
    Role.REVIEWER: frozenset({Permission.VIEW, Permission.REVIEW}),
    Role.ADMIN: frozenset(Permission),
}


def role_allows(role: Role | str, permission: Permission) -> bool:
    return permission in ROLE_PERMISSIONS[Role(role)]
