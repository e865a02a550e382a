"""The sessions API: the journal since a seq, paginated; odd query input is no error."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.journal import journal_append
from apps.operators.models import Operator
from apps.operators.services import suite_set
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


def test_sessions_are_listed_with_their_journal_s_counters_in_a_fixed_number_of_queries(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    """`last_seq` and `tokens_used` live on the session's journal row (issue 50): the API and
    the sessions page read them from there, all of a list's at once."""
    stored_builtin("relu")
    client = client_for(Role.VIEWER)
    url = f"/api/teams/{team.slug}/sessions"

    def listed() -> tuple[dict[int, tuple[int, int]], int, int]:
        with CaptureQueriesContext(connection) as api:
            items = client.get(url, {"limit": 100}).json()["items"]
        with CaptureQueriesContext(connection) as page:
            assert client.get(f"/t/{team.slug}/sessions/").status_code == 200
        counters = {s["id"]: (s["last_seq"], s["tokens_used"]) for s in items}
        return counters, len(api), len(page)

    first = session_create(team=team, user=None, operators=["relu"], start=False)
    called = {"operator": "relu", "iteration": 1, "model": "m", "usage": {"input_tokens": 40}}
    journal_append(session_id=first.pk, kind="model_called", payload=called)
    counters, api_queries, page_queries = listed()
    assert counters == {first.pk: (1, 40)}

    more = [session_create(team=team, user=None, operators=["relu"], start=False)
            for _ in range(3)]  # fmt: skip
    journal_append(session_id=more[0].pk, kind="session_note", payload={"text": "n"})
    counters, *queries = listed()
    assert counters == {first.pk: (1, 40), more[0].pk: (1, 0), more[1].pk: (0, 0),
                        more[2].pk: (0, 0)}  # fmt: skip
    assert queries == [api_queries, page_queries]


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
    """`open` lists branches to show: what is no case id is passed over. (A session filter that
    is no number is refused, saying why: tests/memory/test_forest_views.py.)"""
    client = client_for(Role.VIEWER)
    assert client.get(f"/t/{team.slug}/forest/", {"open": "²,x"}).status_code == 200


def test_a_launch_by_suite_runs_the_team_s_own_suite_where_a_shared_one_has_its_slug(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    """`import_suite level1` from the command line makes a shared kernelbench-level1, the
    import on the team's page the team's own: the launch ran the shared one (first by name)
    while the suite's page showed the team's."""
    relu, gelu = (Operator.objects.get(pk=stored_builtin(s).operator_id) for s in ("relu", "gelu"))
    suite_set(team=None, slug="kernelbench-level1", name="A shared", operators=[relu])
    suite_set(team=team, slug="kernelbench-level1", name="B ours", operators=[gelu])
    client = client_for(Role.ENGINEER)

    shown = client.get(f"/api/teams/{team.slug}/suites/kernelbench-level1").json()
    launched = client.post(f"/api/teams/{team.slug}/sessions", {"suite": "kernelbench-level1"},
                           content_type="application/json")  # fmt: skip
    unknown = client.post(f"/api/teams/{team.slug}/sessions", {"suite": "kernelbench-level9"},
                          content_type="application/json")  # fmt: skip

    config = launched.json()["config"]
    assert shown["name"] == config["suite"]["name"] == "B ours"
    assert [o["slug"] for o in config["operators"]] == shown["operators"] == ["gelu"]
    assert unknown.status_code == 400
    assert unknown.json()["error"]["message"] == "no suite 'kernelbench-level9'"
