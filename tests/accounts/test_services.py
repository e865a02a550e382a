from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from apps.accounts.models import Membership, Team
from apps.accounts.roles import Role
from apps.accounts.services import (
    admin_bootstrap,
    membership_remove,
    membership_set,
    team_create,
)
from apps.core.errors import Conflict, DomainError, NotFound

pytestmark = pytest.mark.django_db


def test_bootstrap_creates_the_admin_and_a_default_team_once() -> None:
    first = admin_bootstrap(username="admin")
    second = admin_bootstrap(username="admin")
    assert first.created and first.password
    assert not second.created and second.password is None
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(first.password)
    assert Membership.objects.get(user=admin).role == Role.ADMIN
    assert Team.objects.count() == 1


def test_bootstrap_sets_the_password_it_is_given() -> None:
    admin_bootstrap(username="admin")
    result = admin_bootstrap(username="admin", password="chosen-pw-1")
    assert result.password == "chosen-pw-1"
    assert User.objects.get(username="admin").check_password("chosen-pw-1")


def test_a_restart_with_the_same_password_keeps_the_admin_signed_in() -> None:
    """Setting the same password again gave it a new salt, which ended every browser session
    of the admin at each start of `make run`; a changed password still applies."""
    admin_bootstrap(username="admin", password="chosen-pw-1")
    stored = User.objects.get(username="admin").password
    again = admin_bootstrap(username="admin", password="chosen-pw-1")
    assert User.objects.get(username="admin").password == stored
    assert again.password is None  # nothing was set: the start says the admin exists

    changed = admin_bootstrap(username="admin", password="chosen-pw-2")
    assert User.objects.get(username="admin").check_password("chosen-pw-2")
    assert changed.password == "chosen-pw-2"


def test_the_team_creator_becomes_its_admin(user: User) -> None:
    team = team_create(name="Kernel Lab", owner=user)
    assert team.slug == "kernel-lab"
    assert team.memberships.get().role == Role.ADMIN


def test_a_duplicate_team_slug_is_a_conflict(user: User) -> None:
    team_create(name="Kernel Lab", owner=user)
    with pytest.raises(Conflict, match="kernel-lab"):
        team_create(name="Kernel  Lab", owner=user)


def test_setting_an_unknown_role_says_which_roles_exist(team, user: User) -> None:
    with pytest.raises(DomainError, match="viewer, engineer, reviewer, admin"):
        membership_set(team=team, username=user.username, role="owner")


def test_setting_a_role_for_an_unknown_user_is_not_found(team) -> None:
    with pytest.raises(NotFound, match="ghost"):
        membership_set(team=team, username="ghost", role="viewer")


def test_removing_the_last_admin_is_refused_and_nothing_changes(user: User) -> None:
    team = team_create(name="Solo", owner=user)
    with pytest.raises(Conflict, match="at least one admin"):
        membership_remove(team=team, username=user.username)
    assert team.memberships.filter(user=user, role=Role.ADMIN).exists()
