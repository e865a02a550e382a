"""A session's live events over a websocket: the gap from the journal first, then live.

The client connects to /ws/sessions/<id>/?after=<last seq it has>. The consumer joins the
session's group before it reads the journal, so nothing committed in between is missed; it
then sends every event with seq > after (an after beyond the journal's end reads as its end)
in order, and afterwards each live event whose seq is the next one. A live event that is
already sent is dropped; one that skips ahead (a message lost while the channel layer
restarted) makes it read the gap from the journal first. So the client sees every event once,
in order, with no holes; a lost *last* message shows with the next event or at the next
(re)connection, which asks from the last seq the client has.

While the session is queued, the line it waits in may move (apps/runs/queue.py): the client
then gets `{"queue": "moved"}`, no seq, and asks the page again for the session's place.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from apps.accounts.models import Membership
from apps.core.consumers import CLOSE_FORBIDDEN, MembersOnlyConsumer, refuse
from apps.core.events import session_group
from apps.memory.journal import journal_last_seq, session_event
from apps.memory.models import JournalEvent
from apps.runs.event_text import event_summary
from apps.runs.models import OptimizationSession

BATCH = 500
MAX_SEQ = 2**63 - 1  # the journal's seq is a bigint


@database_sync_to_async  # type: ignore[untyped-decorator]
def may_watch(user_id: int | None, session_id: int) -> bool:
    if user_id is None:
        return False
    team_id = OptimizationSession.objects.filter(pk=session_id).values_list("team_id", flat=True)
    return Membership.objects.filter(user_id=user_id, user__is_active=True,
                                     team_id__in=team_id).exists()  # fmt: skip


@database_sync_to_async  # type: ignore[untyped-decorator]
def events_after(session_id: int, seq: int) -> list[dict[str, Any]]:
    events = JournalEvent.objects.filter(session_id=session_id, seq__gt=seq).order_by("seq")
    return [dict(session_event(e)) for e in events[:BATCH]]


@database_sync_to_async  # type: ignore[untyped-decorator]
def journal_end(session_id: int) -> int:
    """The session's last seq, 0 before its first event."""
    return journal_last_seq(session_id)


def requested_after(query_string: bytes) -> int:
    """The client's last seq; a value that is not one a journal can hold reads as 0 (the
    client drops what it already has)."""
    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    text = values[0]
    # the length check first: int() raises on a string of thousands of digits
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_SEQ)):
        return 0
    seq = int(text)
    return seq if seq <= MAX_SEQ else 0


class SessionEventsConsumer(MembersOnlyConsumer):
    session_id = 0
    last_seq = 0

    async def connect(self) -> None:
        self.session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        if not await may_watch(self.user_id, self.session_id):
            await refuse(self, CLOSE_FORBIDDEN)
            return
        self.group = session_group(self.session_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Read after joining the group: a client cannot have events the journal has not
        # written yet, so one asking from beyond its end (a seq kept from another database)
        # gets the events that come next rather than none until its number.
        requested = requested_after(self.scope.get("query_string", b""))
        self.last_seq = min(requested, await journal_end(self.session_id))
        await self.catch_up()

    async def catch_up(self) -> None:
        while True:
            events = await events_after(self.session_id, self.last_seq)
            for event in events:
                await self.deliver(event)
            if len(events) < BATCH:
                return

    async def session_event(self, message: dict[str, Any]) -> None:
        if not await self.still_allowed():
            return
        event = message["payload"]
        if event["seq"] <= self.last_seq:
            return
        if event["seq"] > self.last_seq + 1:
            await self.catch_up()  # the journal has the gap and this event
            return
        await self.deliver(event)

    async def queue_moved(self, message: dict[str, Any]) -> None:
        """Sent while the session is queued: the page asks again where it stands."""
        if await self.still_allowed():
            await self.send(text_data=json.dumps({"queue": "moved"}))

    async def may_see(self) -> bool:
        return bool(await may_watch(self.user_id, self.session_id))

    async def deliver(self, event: dict[str, Any]) -> None:
        summary = event_summary(event["kind"], event["payload"])
        await self.send(text_data=json.dumps({**event, "summary": summary}))
        self.last_seq = event["seq"]
