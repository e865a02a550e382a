"""The single-machine channel layer delivers each message once, also one sent while its
listener starts, when it is used from one event loop after another, and after the database
dropped its connections; a listener stopped while it connects leaves no connection open; an
event for a group nobody is in is no warning."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from kope_web.channel_layers import DatabaseChannelLayer

PROBE = {"type": "probe"}


async def receive_or_none(layer: DatabaseChannelLayer, channel: str, timeout: float) -> Any:
    try:
        return await asyncio.wait_for(layer.receive(channel), timeout)
    except TimeoutError:
        return None


async def send_as_the_receiver_starts(layer: DatabaseChannelLayer) -> list[Any]:
    channel = await layer.new_channel()
    receiving = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0)  # the receiver is on its way to start the listener
    await layer.send(channel, PROBE)
    first = await asyncio.wait_for(receiving, 10)
    return [first, await receive_or_none(layer, channel, timeout=0.3)]


def test_a_message_sent_while_the_listener_starts_arrives_once_in_every_event_loop(
    transactional_db: None,
) -> None:
    layer = DatabaseChannelLayer(prefix="kope-layer-test")
    for _ in range(6):  # each async_to_sync call runs an event loop of its own
        assert async_to_sync(send_as_the_receiver_starts)(layer) == [PROBE, None]


def test_a_message_stored_before_anyone_listens_is_delivered(transactional_db: None) -> None:
    sender, receiver = (DatabaseChannelLayer(prefix="kope-layer-test") for _ in range(2))

    async def send_then_receive() -> list[Any]:
        channel = await receiver.new_channel()
        await sender.send(channel, PROBE)
        return [await receive_or_none(receiver, channel, timeout=10),
                await receive_or_none(receiver, channel, timeout=0.3)]  # fmt: skip

    assert async_to_sync(send_then_receive)() == [PROBE, None]


def drop_every_other_connection() -> None:
    """What a database restart does to the connections the pool holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> "
            "pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'"
        )


def test_messages_flow_on_after_the_database_dropped_the_pools_connections(
    transactional_db: None,
) -> None:
    """As a Celery worker publishes: each async_to_sync call runs an event loop of its own."""
    layer = DatabaseChannelLayer(prefix="kope-layer-test")

    async def group_round_trip() -> Any:
        channel = await layer.new_channel()
        await layer.group_add("restart-check", channel)
        await layer.group_send("restart-check", PROBE)
        return await receive_or_none(layer, channel, timeout=5)

    assert async_to_sync(group_round_trip)() == PROBE
    drop_every_other_connection()
    for _ in range(3):
        assert async_to_sync(asyncio.wait_for)(group_round_trip(), 10) == PROBE


def test_a_listener_stopped_while_it_connects_leaves_no_connection_open(
    transactional_db: None,
) -> None:
    """A test's event loop that closes, or a browser that leaves at once, cancels the listener
    mid-connect. The layer keeps its listener task, and the task its exception: a traceback
    through psycopg's connect kept the half-open connection, for the life of the process."""
    with socket.create_server(("127.0.0.1", 0)) as silent_server:  # accepts, never answers
        layer = DatabaseChannelLayer(prefix="kope-layer-test")
        port = silent_server.getsockname()[1]
        layer.db_params = {**layer.db_params, "host": "127.0.0.1", "port": port,
                           "connect_timeout": 60}  # fmt: skip

        async def receive_briefly() -> None:
            await receive_or_none(layer, await layer.new_channel(), timeout=0.5)

        asyncio.run(receive_briefly())  # closing its loop cancels the connecting listener
        assert layer.listener is not None and layer.listener.cancelled()
        gc.collect()
        silent_server.settimeout(5)
        client, _ = silent_server.accept()
        with client:
            client.settimeout(10)
            while client.recv(4096):  # what libpq sent before it waited for an answer
                pass  # an empty read: the listener's side closed the connection


def test_an_event_for_a_session_nobody_watches_logs_no_warning(
    transactional_db: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The usual case: a session's events go to its group whether or not a browser is in it.
    channels_postgres warned on each one, burying a benchmark's progress lines."""
    layer = DatabaseChannelLayer(prefix="kope-layer-test")

    with caplog.at_level(logging.WARNING):
        async_to_sync(layer.group_send)("nobody-watches", PROBE)

    assert [r.getMessage() for r in caplog.records if r.name.startswith("channels_postgres")] == []
