"""The forest's session filter: a number that names no session shows nothing, and text that is
no session number is refused with a reason, never taken for "no filter"."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from tests.memory.test_forest_pages import small_forest


@pytest.fixture
def viewer(client_for: Callable[[Role], Client]) -> Client:
    return client_for(Role.VIEWER)


def test_a_session_filter_of_0_shows_no_node(team: Team, viewer: Client) -> None:
    ids = small_forest(team)

    response = viewer.get(f"/t/{team.slug}/forest/?operator=gemm&session=0")

    page = response.content.decode()
    assert response.status_code == 200
    assert f'data-case="{ids["start"]}"' not in page
    assert "the filters hide 4" in page
    assert 'name="session" inputmode="numeric" size="6" value="0"' in page


@pytest.mark.parametrize("typed", ["-1", "abc", "1.5", "²"])
def test_a_session_filter_that_is_no_session_number_is_refused_with_why(
    team: Team, viewer: Client, typed: str
) -> None:
    ids = small_forest(team)

    response = viewer.get(f"/t/{team.slug}/forest/", {"operator": "gemm", "session": typed})

    page = response.content.decode()
    assert response.status_code == 400
    assert "Session: a session number such as 12" in page
    assert 'aria-invalid="true" aria-describedby="session-error"' in page
    assert f'data-case="{ids["start"]}"' not in page  # nothing shown as if unfiltered
    assert f'value="{typed}"' in page  # what was typed stays, to be corrected


def test_the_children_fragment_applies_a_session_filter_of_0(team: Team, viewer: Client) -> None:
    ids = small_forest(team)

    part = viewer.get(f"/t/{team.slug}/forest/{ids['start']}/children/?session=0")

    assert f'data-case="{ids["fast"]}"' not in part.content.decode()
