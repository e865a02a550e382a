"""The team's live socket: only the team's members receive its workers' answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.core.events import EventKind, WorkerAlive, publish, team_group
from apps.workbench.consumers import TeamEventsConsumer
from tests.factories import MembershipFactory
from tests.runs.test_session_socket import deactivated, removed


def answer_to(team_id: int) -> None:
    payload = WorkerAlive(check_id="c1", hostname="w@host", queue="agent", answered_at="now")
    publish(team_group(team_id), EventKind.WORKER_ALIVE, payload)


@pytest.mark.parametrize("leave", [removed, deactivated])
def test_a_member_removed_or_deactivated_while_watching_is_closed_out_before_the_next_answer(
    transactional_db: None, leave: Callable[[Membership], None]
) -> None:
    watcher = MembershipFactory(role=Role.VIEWER)
    MembershipFactory(team=watcher.team, role=Role.ADMIN)  # the team keeps an admin
    team = watcher.team

    async def watch() -> dict[str, Any]:
        socket = WebsocketCommunicator(TeamEventsConsumer.as_asgi(), f"/ws/teams/{team.slug}/")
        socket.scope["user"] = watcher.user
        socket.scope["url_route"] = {"kwargs": {"team": team.slug}}
        connected, _ = await socket.connect(timeout=10)
        assert connected
        await sync_to_async(leave)(watcher)
        await sync_to_async(answer_to)(team.pk)
        output: dict[str, Any] = await socket.receive_output(timeout=10)
        await socket.disconnect()
        return output

    assert async_to_sync(watch)() == {"type": "websocket.close", "code": 4403}
