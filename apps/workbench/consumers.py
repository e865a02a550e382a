"""The team's live socket: authenticate, join the team's group, relay events as HTML."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from apps.accounts.models import Membership
from apps.core.consumers import CLOSE_FORBIDDEN, MembersOnlyConsumer, refuse
from apps.core.events import team_group

CLOSE_NOT_FOUND = 4404


@database_sync_to_async  # type: ignore[untyped-decorator]
def team_id_for(user_id: int | None, team_slug: str) -> int | None:
    if user_id is None:
        return None
    membership = Membership.objects.filter(user_id=user_id, team__slug=team_slug).first()
    return membership.team_id if membership else None


@database_sync_to_async  # type: ignore[untyped-decorator]
def is_member(user_id: int | None, team_id: int) -> bool:
    if user_id is None:
        return False
    return Membership.objects.filter(user_id=user_id, user__is_active=True,
                                     team_id=team_id).exists()  # fmt: skip


class TeamEventsConsumer(MembersOnlyConsumer):
    team_id = 0

    async def connect(self) -> None:
        slug = self.scope["url_route"]["kwargs"]["team"]
        team_id = await team_id_for(self.user_id, slug)
        if team_id is None:
            await refuse(self, CLOSE_FORBIDDEN)
            return
        self.team_id = team_id
        self.group = team_group(team_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def worker_alive(self, message: dict[str, Any]) -> None:
        if not await self.still_allowed():
            return
        html = render_to_string("workbench/workers.html#answer", {"answer": message["payload"]})
        await self.send(text_data=html)

    async def may_see(self) -> bool:
        return bool(await is_member(self.user_id, self.team_id))


class NoSuchSocket(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Any other websocket path: refused with 4404, not Channels' "No route found" traceback
    in the server's log."""

    async def connect(self) -> None:
        await refuse(self, CLOSE_NOT_FOUND)
