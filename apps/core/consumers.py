"""What the team's sockets share: one group, left as soon as the user may no longer see it."""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer

CLOSE_FORBIDDEN = 4403


async def refuse(consumer: AsyncWebsocketConsumer, code: int) -> None:
    """End a socket at its handshake with `code`. Closed before it is accepted, a socket
    reaches a browser as an HTTP 403, which the browser reports as 1006 (abnormal closure):
    a client that reconnects after 1006 (htmx's ws extension, session-live.js) would try for
    ever, never told why."""
    await consumer.accept()
    await consumer.close(code=code)


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
