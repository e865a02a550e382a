"""The single-machine channel layer: channels_postgres over the project's own database."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import psycopg
from channels_postgres.core import PostgresChannelLayer
from django.conf import settings

from kope_web import embedded_db

NOTIFY_CHANNEL = "channels_postgres_messages"  # the one channels_postgres's trigger notifies


def database_params() -> dict[str, Any]:
    params = dict(settings.DATABASES["default"])
    if "DATA_DIR" in params:
        params["HOST"] = embedded_db.socket_dir(params["DATA_DIR"], params["SERVER_DATABASE"])
        params["ENGINE"] = "django.db.backends.postgresql"
    return params


class DatabaseChannelLayer(PostgresChannelLayer):  # type: ignore[misc]
    """channels_postgres with its listener made safe to start at any moment.

    A message reaches this process either read from the message table when the listener
    starts or by the table's NOTIFY once it listens. channels_postgres read first and listened
    second, so a message sent in between was lost; and a layer used from a second event loop
    (each async_to_sync call outside a loop runs one of its own) took the first loop's
    "listening" flag for its own and received before its listener listened."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config, **database_params())
        # Leaving a group goes through Django's ORM under the alias "channels_postgres", which
        # this project does not define: its tables live in the default database.
        self.django_db.using = "default"
        self.listener: asyncio.Task[None] | None = None
        self.listener_loop: asyncio.AbstractEventLoop | None = None

    def _get_or_create_listener_task(self) -> tuple[asyncio.Event, bool]:
        """One listener per event loop, started here; False tells receive() not to start
        another."""
        running = asyncio.get_running_loop()
        if self.listener is None or self.listener.done() or self.listener_loop is not running:
            self.listener_loop = running
            self.listener_task_is_running = asyncio.Event()
            self.listener = running.create_task(self.listen_to_all_channels())
        assert self.listener_task_is_running is not None
        return self.listener_task_is_running, False

    async def listen_to_all_channels(self) -> None:
        """Listen first, then read what the table holds: a message sent in between is both
        read and notified, and is delivered once."""
        conninfo = psycopg.conninfo.make_conninfo(conninfo="", **self.db_params)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as connection:
            await connection.execute(f"LISTEN {NOTIFY_CHANNEL}")
            already_queued = await self.queue_stored_messages()
            assert self.listener_task_is_running is not None
            self.listener_task_is_running.set()
            async for event in connection.notifies():
                message_id, channel = event.payload.split(":")[:2]
                if message_id in already_queued:
                    already_queued.discard(message_id)
                elif self._channel_advisory_locks.get(channel, False):
                    self._get_or_create_queue(channel).put_nowait(event.payload)
                # else another process holds that channel and receives the message

    async def queue_stored_messages(self) -> set[str]:
        """Queue the unexpired messages in the table, oldest first; return their ids."""
        stored = await self.django_db.retrieve_non_expired_queued_messages()
        stored.sort(key=lambda row: int(row[0]))
        for message_id, channel, message, expires_at in stored:
            encoded = base64.b64encode(message).decode("ascii")
            payload = f"{message_id}:{channel}:{encoded}:{expires_at}"
            self._get_or_create_queue(channel).put_nowait(payload)
        return {row[0] for row in stored}
