"""The Operators and Imports pages and API where a team's lists and versions run long or are
asked for what is not there."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
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
