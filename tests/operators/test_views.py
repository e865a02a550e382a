"""The Operators and Imports pages and API where a team's lists and versions run long or are
asked for what is not there."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.models import ImportRun
from apps.operators.services import suite_set
from tests.factories import stored_builtin


@pytest.fixture
def viewer(client_for: Callable[[Role | str], Client]) -> Client:
    return client_for(Role.VIEWER)


def test_version_0_of_an_operator_is_not_found_rather_than_the_newest(
    team: Team, viewer: Client
) -> None:
    stored_builtin("relu", team)

    api = viewer.get("/api/teams/kernels/operators/relu?version=0")
    page = viewer.get("/t/kernels/operators/relu/?v=0")

    assert api.status_code == 404
    assert api.json()["error"]["message"] == "No version 0 of relu."
    assert page.status_code == 404


def test_the_imports_page_pages_back_to_the_oldest_import(team: Team, viewer: Client) -> None:
    for n in range(51):
        ImportRun.objects.create(team=team, path=f"/data/import-{n:02}", format="kernelbench")

    first = viewer.get("/t/kernels/imports/").content.decode()
    older = viewer.get("/t/kernels/imports/?page=2").content.decode()

    assert "/data/import-50" in first and "/data/import-00" not in first
    assert "Imports 1 to 50 of 51" in first and 'href="?page=2"' in first
    assert "/data/import-00" in older and "/data/import-50" not in older


def test_a_shared_operator_or_suite_of_a_slug_the_team_has_its_own_of_is_not_listed(
    team: Team, viewer: Client
) -> None:
    """Its slug leads to the team's own (a link from its row opened that); the lists show
    the one the slug leads to, as the launch does."""
    shared, own = stored_builtin("relu"), stored_builtin("relu", team)
    suite_set(team=None, slug="mine", name="Shared suite", operators=[shared.operator])
    suite_set(team=team, slug="mine", name="Own suite", operators=[own.operator])

    operators = viewer.get("/t/kernels/operators/").content.decode()
    suites = viewer.get("/t/kernels/suites/").content.decode()
    api_operators = viewer.get("/api/teams/kernels/operators").json()
    api_suites = viewer.get("/api/teams/kernels/suites").json()

    assert "1 of 1 operator," in operators and " · shared" not in operators
    assert "Own suite" in suites and "Shared suite" not in suites
    assert [(o["slug"], o["shared"]) for o in api_operators["items"]] == [("relu", False)]
    assert [(s["name"], s["shared"]) for s in api_suites["items"]] == [("Own suite", False)]


def test_a_valid_level_filters_even_when_the_family_in_the_link_is_unknown(
    team: Team, viewer: Client
) -> None:
    """A stale or mistyped family dropped the level too, and the page listed every level."""
    stored_builtin("relu", team)  # level 1
    stored_builtin("gemm", team)  # level 3

    page = viewer.get("/t/kernels/operators/?family=no-such-family&level=3").content.decode()

    assert "1 of 2 operators" in page and "GEMM" in page and "ReLU" not in page
