"""The sessions API: the journal since a seq, paginated; odd query input is no error."""

from __future__ import annotations

from collections.abc import Callable

from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.journal import journal_append
from apps.runs.services import session_create
from tests.factories import stored_builtin


def test_events_since_a_seq_come_in_order_and_in_pages(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    for n in range(5):
        journal_append(session_id=session.pk, kind="session_note", payload={"text": f"n{n}"})
    url = f"/api/teams/{team.slug}/sessions/{session.pk}/events"
    client = client_for(Role.VIEWER)

    page = client.get(url, {"since": 2, "limit": 2}).json()

    assert page["count"] == 3
    assert [(e["seq"], e["payload"]["text"]) for e in page["items"]] == [(3, "n2"), (4, "n3")]
    assert {"seq", "kind", "payload", "at", "case"} == set(page["items"][0])


def test_a_case_recorded_event_names_its_case(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    relu = stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    journal_append(session_id=session.pk, kind="session_note", payload={"text": "before"})
    case = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 0, "version_id": relu.pk, "target": "cpu-c", "strategy": "start",
        "outcome": "no_change", "correct": True})  # fmt: skip
    url = f"/api/teams/{team.slug}/sessions/{session.pk}/events"

    items = client_for(Role.VIEWER).get(url).json()["items"]

    assert [(e["kind"], e["case"]) for e in items] == [
        ("session_note", None),
        ("case_recorded", case.pk),
    ]
    assert client_for(Role.VIEWER).get(f"/t/{team.slug}/cases/{case.pk}/").status_code == 200


def test_odd_numbers_in_page_queries_are_ignored_not_errors(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    client = client_for(Role.VIEWER)
    assert client.get(f"/t/{team.slug}/forest/", {"session": "²", "open": "²,x"}).status_code == 200
