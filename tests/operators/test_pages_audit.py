"""The Operators and Imports pages and API where a team's lists and versions run long or are
asked for what is not there."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.models import ImportRun
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
