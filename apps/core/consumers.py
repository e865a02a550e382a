"""What the team's sockets share: one group, left as soon as the user may no longer see it."""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer

CLOSE_FORBIDDEN = 4403


class MembersOnlyConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    group: str | None = None

    @property
    def user_id(self) -> int | None:
        """The logged-in user's id; None for an anonymous one (never a member)."""
        user = self.scope.get("user")
        return user.pk if user is not None and user.is_authenticated else None

    async def may_see(self) -> bool:
        """Whether the user may still receive what the group carries."""
        raise NotImplementedError

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def still_allowed(self) -> bool:
        """Checked again before each message: a member removed from the team while connected
        is closed out (4403) instead of receiving the team's events from then on."""
        if self.group is None:  # already closed out; messages queued before that still arrive
            return False
        if await self.may_see():
            return True
        await self.channel_layer.group_discard(self.group, self.channel_name)
        self.group = None
        await self.close(code=CLOSE_FORBIDDEN)
        return False
