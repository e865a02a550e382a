"""The session socket: the gap from the journal first, then live events, without duplicates
or holes, also when a live message was lost (the channel layer restarting)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.accounts.services import membership_remove
from apps.memory.journal import journal_append, publish_event
from apps.memory.models import Case
from apps.runs.consumers import SessionEventsConsumer
from apps.runs.services import session_create
from tests.factories import MembershipFactory, TeamFactory, stored_builtin


def note(session_id: int, text: str) -> None:
    journal_append(session_id=session_id, kind="session_note", payload={"text": text})


def communicator(session_id: int, user: Any, after: int) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(SessionEventsConsumer.as_asgi(),
                                   f"/ws/sessions/{session_id}/?after={after}")  # fmt: skip
    socket.scope["user"] = user
    socket.scope["url_route"] = {"kwargs": {"session_id": session_id}}
    return socket


async def received(socket: WebsocketCommunicator, count: int) -> list[tuple[int, str]]:
    events = [json.loads(await socket.receive_from(timeout=10)) for _ in range(count)]
    return [(e["seq"], e["payload"].get("text", "")) for e in events]


def test_a_watcher_gets_the_gap_then_live_events_and_fills_a_lost_one(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored_builtin("relu")
    member = MembershipFactory(role=Role.VIEWER)
    session = session_create(team=member.team, user=None, operators=["relu"], start=False)
    for text in ("one", "two", "three"):
        note(session.pk, text)

    async def watch() -> list[tuple[int, str]]:
        socket = communicator(session.pk, member.user, after=1)
        connected, _ = await socket.connect()
        assert connected
        seen = await received(socket, 2)  # the gap: 2 and 3, from the journal
        await sync(note)(session.pk, "four")  # live
        seen += await received(socket, 1)
        with monkeypatch.context() as quiet:  # the layer loses event 5...
            quiet.setattr("apps.memory.journal.publish_event", lambda event: None)
            await sync(note)(session.pk, "five")
        await sync(note)(session.pk, "six")  # ...and 6 arrives live: 5 comes from the journal
        seen += await received(socket, 2)
        await sync(republish_latest)(session.pk)  # a duplicate is dropped
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return seen

    seen = async_to_sync(watch)()

    assert seen == [(2, "two"), (3, "three"), (4, "four"), (5, "five"), (6, "six")]


def sync(function: Any) -> Any:
    from asgiref.sync import sync_to_async

    return sync_to_async(function)


def republish_latest(session_id: int) -> None:
    from apps.memory.models import JournalEvent

    publish_event(JournalEvent.objects.filter(session_id=session_id).order_by("-seq")[0])


def record_case(session_id: int, version_id: int, iteration: int) -> int:
    event = journal_append(session_id=session_id, kind="case_recorded", payload={
        "iteration": iteration, "version_id": version_id, "target": "cpu-c",
        "strategy": "start", "outcome": "no_change", "correct": True})  # fmt: skip
    return event.pk


def test_a_recorded_case_comes_with_its_id_from_the_journal_and_live(
    transactional_db: None,
) -> None:
    relu = stored_builtin("relu")
    member = MembershipFactory(role=Role.VIEWER)
    session = session_create(team=member.team, user=None, operators=["relu"], start=False)
    note(session.pk, "one")
    recorded = [record_case(session.pk, relu.pk, 0)]

    async def watch() -> list[tuple[str, int | None]]:
        socket = communicator(session.pk, member.user, after=0)
        connected, _ = await socket.connect()
        assert connected
        seen = [json.loads(await socket.receive_from(timeout=10)) for _ in range(2)]
        recorded.append(await sync(record_case)(session.pk, relu.pk, 1))  # live
        seen.append(json.loads(await socket.receive_from(timeout=10)))
        await socket.disconnect()
        return [(event["kind"], event["case"]) for event in seen]

    seen = async_to_sync(watch)()

    assert seen == [("session_note", None), ("case_recorded", recorded[0]),
                    ("case_recorded", recorded[1])]  # fmt: skip
    cases = Case.objects.filter(session_id=session.pk)
    assert set(cases.values_list("pk", flat=True)) == set(recorded)


def test_another_teams_session_cannot_be_watched(transactional_db: None) -> None:
    stored_builtin("relu")
    session = session_create(team=TeamFactory(), user=None, operators=["relu"], start=False)
    outsider = MembershipFactory(role=Role.ADMIN).user

    async def attempt() -> tuple[bool, Any]:
        socket = communicator(session.pk, outsider, after=0)
        connected, _ = await socket.connect()
        closed = await socket.receive_output()
        await socket.disconnect()
        return connected, closed

    # accepted, then closed: refused at the handshake, a browser would see only 1006
    assert async_to_sync(attempt)() == (True, {"type": "websocket.close", "code": 4403})


def removed(member: Membership) -> None:
    membership_remove(team=member.team, username=member.user.username)


def deactivated(member: Membership) -> None:
    User.objects.filter(pk=member.user_id).update(is_active=False)


@pytest.mark.parametrize("leave", [removed, deactivated])
def test_a_member_removed_or_deactivated_while_watching_is_closed_out_before_the_next_event(
    transactional_db: None, leave: Callable[[Membership], None]
) -> None:
    stored_builtin("relu")
    watcher = MembershipFactory(role=Role.VIEWER)
    MembershipFactory(team=watcher.team, role=Role.ADMIN)  # the team keeps an admin
    session = session_create(team=watcher.team, user=None, operators=["relu"], start=False)

    async def watch() -> dict[str, Any]:
        socket = communicator(session.pk, watcher.user, after=0)
        connected, _ = await socket.connect()
        assert connected
        await sync(leave)(watcher)
        await sync(note)(session.pk, "after the removal")
        output: dict[str, Any] = await socket.receive_output(timeout=10)
        await socket.disconnect()
        return output

    assert async_to_sync(watch)() == {"type": "websocket.close", "code": 4403}


def test_a_watcher_asking_from_beyond_the_journals_end_gets_the_next_events(
    transactional_db: None,
) -> None:
    stored_builtin("relu")
    member = MembershipFactory(role=Role.VIEWER)
    session = session_create(team=member.team, user=None, operators=["relu"], start=False)
    note(session.pk, "one")

    async def watch() -> list[tuple[int, str]]:
        socket = communicator(session.pk, member.user, after=50)  # the journal ends at 1
        connected, _ = await socket.connect()
        assert connected
        await sync(note)(session.pk, "two")
        seen = await received(socket, 1)
        await socket.disconnect()
        return seen

    assert async_to_sync(watch)() == [(2, "two")]
