from __future__ import annotations

import pytest

from apps.accounts.roles import Permission, Role, role_allows


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        (Role.VIEWER, {Permission.VIEW}),
        (Role.ENGINEER, {Permission.VIEW, Permission.RUN}),
        (Role.REVIEWER, {Permission.VIEW, Permission.REVIEW}),
        (Role.ADMIN, set(Permission)),
    ],
)
def test_each_role_has_exactly_its_permissions(role: Role, allowed: set[Permission]) -> None:
    assert {p for p in Permission if role_allows(role, p)} == allowed


def test_an_unknown_role_is_an_error_not_a_silent_denial() -> None:
    with pytest.raises(ValueError, match="superuser"):
        role_allows("superuser", Permission.VIEW)
