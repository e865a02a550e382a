"""The single-machine channel layer: channels_postgres over the project's own database."""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import psycopg
from channels_postgres.core import PostgresChannelLayer
from channels_postgres.db import DatabaseLayer
from django.conf import settings
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from kope_web import embedded_db

NOTIFY_CHANNEL = "channels_postgres_messages"  # the one channels_postgres's trigger notifies
# DatabaseLayer's operations that take a connection from the pool.
POOLED_OPERATIONS = (
    "retrieve_group_channels", "send_to_channel", "add_channel_to_group",
    "delete_expired_groups", "delete_expired_messages", "retrieve_non_expired_queued_messages",
    "retrieve_non_expired_queued_message_from_channel", "acquire_advisory_lock",
    "delete_message_returning_message", "flush",
)  # fmt: skip
Result = TypeVar("Result")


def database_params() -> dict[str, Any]:
    params = dict(settings.DATABASES["default"])
    if "DATA_DIR" in params:
        params["HOST"] = embedded_db.socket_dir(params["DATA_DIR"], params["SERVER_DATABASE"])
        params["ENGINE"] = "django.db.backends.postgresql"
    return params


class PoolHome:
    """A thread running one event loop for the life of the process, and the pool on it.

    psycopg's pool replaces a broken connection with a task on the loop it was opened in.
    channels_postgres opened its one pool in whichever loop used the layer first: in a Celery
    worker or a Django view, a loop that async_to_sync made for one call and then closed. Once
    the database restarted, that pool never got a connection back, and every publish waited
    30 s and failed. Here the pool lives on a loop that never closes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.opening = asyncio.Lock()
        self.pool: AsyncConnectionPool | None = None
        thread = threading.Thread(target=self.loop.run_forever, name="channel-pool", daemon=True)
        thread.start()

    async def run(self, operation: Callable[[], Coroutine[Any, Any, Result]]) -> Result:
        retried = self.retried_once_on_a_dropped_connection(operation)
        if asyncio.get_running_loop() is self.loop:  # an operation another one calls
            return await retried
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(retried, self.loop))

    async def retried_once_on_a_dropped_connection(
        self, operation: Callable[[], Coroutine[Any, Any, Result]]
    ) -> Result:
        """The pool does not check a connection before it hands it out: after the database
        restarted, the first operation fails on a dropped one. Then the pool checks them all,
        replacing the dropped ones, and the operation runs once more."""
        try:
            return await operation()
        except PoolTimeout:
            raise  # no connection came at all: the database is down, not restarted
        except psycopg.OperationalError:
            if self.pool is None:
                raise
            await self.pool.check()
            return await operation()

    async def get_pool(self, db_params: dict[str, Any], options: dict[str, Any]) -> Any:
        if asyncio.get_running_loop() is not self.loop:
            raise RuntimeError(
                "a channels_postgres operation took a pooled connection outside the pool's "
                "loop: add it to POOLED_OPERATIONS in kope_web/channel_layers.py"
            )
        async with self.opening:
            if self.pool is None:
                conninfo = psycopg.conninfo.make_conninfo(conninfo="", **db_params)
                pool = AsyncConnectionPool(
                    conninfo,
                    open=False,
                    configure=configure_connection,
                    **options,
                )
                await pool.open(wait=True)
                self.pool = pool
        return self.pool


async def configure_connection(connection: psycopg.AsyncConnection[Any]) -> None:
    """As channels_postgres configures its pool's connections."""
    await connection.set_autocommit(True)
    connection.prepare_threshold = 0
    connection.prepared_max = None


_home: PoolHome | None = None
_home_lock = threading.Lock()


def pool_home() -> PoolHome:
    global _home
    with _home_lock:
        if _home is None:
            _home = PoolHome()
        return _home


def close_pool() -> None:
    """Close this process's pool: its idle connections keep the database in use."""
    home = _home
    if home is not None and home.pool is not None:
        asyncio.run_coroutine_threadsafe(home.pool.close(), home.loop).result(timeout=30)
        home.pool = None


def _forget_the_parents_pool() -> None:
    """A forked child has the parent's pool but not the thread that runs it."""
    global _home, _home_lock
    _home, _home_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_pool)


def on_the_pool_loop(
    operation: Callable[..., Coroutine[Any, Any, Result]],
) -> Callable[..., Coroutine[Any, Any, Result]]:
    @functools.wraps(operation)
    async def run_there(*args: Any, **kwargs: Any) -> Result:
        return await pool_home().run(lambda: operation(*args, **kwargs))

    return run_there


class PooledOnItsOwnLoop(DatabaseLayer):  # type: ignore[misc]
    """channels_postgres's database operations, each run on the pool's own loop."""

    async def get_db_pool(self, db_params: dict[str, Any]) -> Any:
        return await pool_home().get_pool(db_params, self.psycopg_options)


for _name in POOLED_OPERATIONS:
    setattr(PooledOnItsOwnLoop, _name, on_the_pool_loop(getattr(DatabaseLayer, _name)))


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
        options = config.get("PSYCOPG_OPTIONS", {})
        self.django_db = PooledOnItsOwnLoop(options, self.db_params, using="default")
        self.listener: asyncio.Task[None] | None = None

    def _get_or_create_listener_task(self) -> tuple[asyncio.Event, bool]:
        """One listener per event loop, started here; False tells receive() not to start
        another."""
        running = asyncio.get_running_loop()
        if self.listener is None or self.listener.done() or self.listener.get_loop() is not running:
            self.listener_task_is_running = asyncio.Event()
            self.listener = running.create_task(self.listen_to_all_channels())
        assert self.listener_task_is_running is not None
        return self.listener_task_is_running, False

    async def listen_to_all_channels(self) -> None:
        """Listen first, then read what the table holds: a message sent in between is both
        read and notified, and is delivered once."""
        async with await listener_connection(self.db_params) as connection:
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


async def listener_connection(db_params: dict[str, Any]) -> psycopg.AsyncConnection[Any]:
    """A connection for the listener. Cancelled mid-connect (its event loop closed), it raises
    without psycopg's frames: the layer keeps its listener task and the task its exception, and
    those frames hold the half-open connection, which would stay open as long as the layer."""
    conninfo = psycopg.conninfo.make_conninfo(conninfo="", **db_params)
    try:
        return await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    except BaseException as error:
        raise error.with_traceback(None) from None
