"""Long lists on HTML pages come in pages of 50, with the filters kept from page to page."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.runs.models import OptimizationSession
from tests.memory.test_rules import TILING, propose


def cards(html: str) -> list[str]:
    return re.findall(r'data-rule="(\d+)"', html)


def test_the_review_queue_pages_through_every_pending_rule(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    proposed = {str(propose(team, f"case:{n}", TILING).pk) for n in range(62)}
    client = client_for(Role.REVIEWER)

    first = client.get(f"/t/{team.slug}/review/?status=pending").content.decode()
    assert len(cards(first)) == 50 and "Rules 1 to 50 of 62" in first
    assert 'href="?status=pending&amp;page=2"' in first
    second = client.get(f"/t/{team.slug}/review/?status=pending&page=2").content.decode()
    assert len(cards(second)) == 12 and "Rules 51 to 62 of 62" in second
    assert set(cards(first)) | set(cards(second)) == proposed
    assert 'href="?status=pending&amp;page=1"' in second and "older →" not in second

    not_a_number = client.get(f"/t/{team.slug}/review/?page=abc").content.decode()
    past_the_end = client.get(f"/t/{team.slug}/review/?page=99").content.decode()
    assert cards(not_a_number) == cards(first) and cards(past_the_end) == cards(second)


def test_a_short_list_has_no_pager(team: Team, client_for: Callable[[Role | str], Client]) -> None:
    propose(team, "case:only", TILING)
    html = client_for(Role.REVIEWER).get(f"/t/{team.slug}/review/").content.decode()
    assert len(cards(html)) == 1 and 'class="pager"' not in html


def test_the_session_list_pages_newest_first(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    OptimizationSession.objects.bulk_create(
        OptimizationSession(team=team, target="cpu-c", label=f"run {n}") for n in range(53)
    )
    client = client_for(Role.VIEWER)
    first = client.get(f"/t/{team.slug}/sessions/").content.decode()
    second = client.get(f"/t/{team.slug}/sessions/?page=2").content.decode()
    newest_first = OptimizationSession.objects.filter(team=team).order_by("-created_at", "-pk")
    newest, oldest = newest_first.first(), newest_first.last()
    assert newest is not None and oldest is not None
    assert f"#{newest.pk} {newest.label}" in first and f"#{oldest.pk} " not in first
    assert "Sessions 51 to 53 of 53" in second and f"#{oldest.pk} {oldest.label}" in second
