"""Where a queued session stands in line and why it waits, read from real sessions, the
advisory locks a worker holds, and the socket that tells a queued session's page the line
moved."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.runs.consumers import SessionEventsConsumer
from apps.runs.loop import session_begin, session_lock
from apps.runs.models import OptimizationSession
from apps.runs.queue import line_now, ordinal, queue_place
from apps.runs.services import session_create, session_pause
from tests.factories import MembershipFactory, TeamFactory, stored_builtin


def launched(team: Team) -> OptimizationSession:
    """A session launched as the page launches one: queued, its message sent (ticket 1)."""
    session = session_create(team=team, user=None, operators=["relu"])
    session.refresh_from_db()
    return session


@pytest.fixture
def relu(db: None) -> None:
    stored_builtin("relu")


def test_queued_sessions_stand_in_line_in_the_order_they_were_launched(
    team: Team, other_team: Team, relu: None
) -> None:
    first, theirs, third = launched(team), launched(other_team), launched(team)

    place = queue_place(third)

    assert place is not None and place.text == "3rd in line"
    # the team's own session is named, another team's only counted
    assert place.reason == (f"waiting behind session #{first.pk} and 1 session of another "
                            "team, queued before it")  # fmt: skip
    assert queue_place(first) is not None and queue_place(first).position == 1  # type: ignore[union-attr]
    assert str(theirs.pk) not in place.reason


def test_the_next_to_start_waits_for_the_sessions_a_worker_runs_an_iteration_of(
    team: Team, relu: None
) -> None:
    running = launched(team)
    session_begin(running)
    waiting = launched(team)

    with session_lock(running.pk) as held:  # what a worker holds while it runs an iteration
        assert held
        place = queue_place(waiting)

    assert place is not None and place.position == 1
    assert place.reason == ("next to start, waiting for a free agent worker: the agent workers "
                            f"are running an iteration of session #{running.pk}")  # fmt: skip


def test_with_no_iteration_running_it_points_at_the_workers(team: Team, relu: None) -> None:
    place = queue_place(launched(team))

    assert place is not None and place.text == "1st in line"
    assert "none is running an iteration now" in place.reason
    assert "whether an agent worker is up" in place.reason


def test_a_session_paused_ahead_leaves_the_line(team: Team, relu: None) -> None:
    ahead, waiting = launched(team), launched(team)
    assert queue_place(waiting).position == 2  # type: ignore[union-attr]

    session_pause(session=ahead, user=None)

    assert queue_place(waiting).position == 1  # type: ignore[union-attr]
    assert queue_place(OptimizationSession.objects.get(pk=ahead.pk)) is None


def test_a_session_never_sent_to_the_workers_is_not_in_line(team: Team, relu: None) -> None:
    made_here = session_create(team=team, user=None, operators=["relu"], start=False)
    launched(team)

    place = queue_place(made_here)

    assert place is not None and place.position is None and place.text == "not in line"
    assert "not sent to the agent workers" in place.reason
    assert [pk for pk, _ in line_now().queued] != [made_here.pk]


@pytest.mark.parametrize("n, text", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"),
                                     (11, "11th"), (12, "12th"), (13, "13th"), (21, "21st"),
                                     (22, "22nd"), (111, "111th")])  # fmt: skip
def test_positions_read_as_ordinals(n: int, text: str) -> None:
    assert ordinal(n) == text


def test_the_api_says_where_a_queued_session_stands(
    team: Team, relu: None, client_for: Any
) -> None:
    first, second = launched(team), launched(team)
    client = client_for(Role.VIEWER)

    answer = client.get(f"/api/teams/{team.slug}/sessions/{second.pk}").json()
    listed = client.get(f"/api/teams/{team.slug}/sessions").json()["items"]

    assert answer["queue_position"] == 2
    assert answer["queue_reason"].startswith(f"waiting behind session #{first.pk}")
    assert [(s["id"], s["queue_position"]) for s in listed] == [(second.pk, 2), (first.pk, 1)]


def test_a_queued_sessions_watcher_is_told_when_the_line_moves(transactional_db: None) -> None:
    stored_builtin("relu")
    member = MembershipFactory(team=TeamFactory(), role=Role.VIEWER)
    ahead, waiting = launched(member.team), launched(member.team)

    async def watch() -> dict[str, Any]:
        socket = WebsocketCommunicator(SessionEventsConsumer.as_asgi(),
                                       f"/ws/sessions/{waiting.pk}/?after=0")  # fmt: skip
        socket.scope["user"] = member.user
        socket.scope["url_route"] = {"kwargs": {"session_id": waiting.pk}}
        connected, _ = await socket.connect()
        assert connected
        await sync_to_async(session_pause)(session=ahead, user=None)
        message: dict[str, Any] = json.loads(await socket.receive_from(timeout=10))
        await socket.disconnect()
        return message

    assert async_to_sync(watch)() == {"queue": "moved"}
