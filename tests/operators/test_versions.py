"""Editing an operator makes a new version; stored versions never change."""

from __future__ import annotations

import pytest

from apps.accounts.models import Team
from apps.core.errors import Conflict, DomainError
from apps.operators.services import version_edit
from tests.factories import UserFactory, stored_builtin


def test_an_edit_makes_a_new_version_and_keeps_the_old_one(team: Team) -> None:
    first = stored_builtin("vector_add", team)
    author = UserFactory()

    second, created = version_edit(
        version=first, user=author, description="Adds two vectors.", max_abs=1e-5
    )

    assert created and (first.number, second.number) == (1, 2)
    assert second.origin == "edited" and second.created_by == author
    assert second.description == "Adds two vectors." and second.spec["max_abs"] == 1e-5
    first.refresh_from_db()
    assert first.description != "Adds two vectors." and first.spec["max_abs"] == 1e-3
    old_cases = [(c.case_id, c.params, c.outputs) for c in first.cases.all()]
    assert [(c.case_id, c.params, c.outputs) for c in second.cases.all()] == old_cases
    assert (
        second.starting_kernels.get(target="cpu-c").source
        == first.starting_kernels.get(target="cpu-c").source
    )


def test_an_edit_that_changes_nothing_makes_no_version(team: Team) -> None:
    first = stored_builtin("vector_add", team)
    same, created = version_edit(version=first, user=None, name=first.name)
    assert not created and same.pk == first.pk


def test_only_the_newest_version_can_be_edited(team: Team) -> None:
    first = stored_builtin("vector_add", team)
    version_edit(version=first, user=None, description="newer")
    with pytest.raises(Conflict, match="is not the newest version"):
        version_edit(version=first, user=None, description="from an old page")


def test_an_edit_based_on_an_older_version_is_refused(team: Team) -> None:
    first = stored_builtin("vector_add", team)
    second, _ = version_edit(version=first, user=None, description="newer", based_on=1)
    with pytest.raises(Conflict, match="the edit was made to version 1 of vector_add, but the "
                       "newest is version 2"):  # fmt: skip
        version_edit(version=second, user=None, description="from an old page", based_on=1)
    assert first.operator.versions.count() == 2


def test_an_edit_is_validated_like_a_spec(team: Team) -> None:
    first = stored_builtin("vector_add", team)
    with pytest.raises(DomainError, match="tolerances must be positive"):
        version_edit(version=first, user=None, max_rel=0.0)
    assert first.operator.versions.count() == 1
