"""The Redis transport when Redis goes away under a worker that holds a message it has not
acknowledged yet (a Redis restart during a task's ack, say). The worker's consumer, on the
lost connection, first collects the connection (kombu detaches its transport) and then closes
it, ignoring connection errors; kombu's channel then tries to put the unacknowledged message
back and, with the transport detached, raised AttributeError, which the worker took for an
unrecoverable error: the worker process exited instead of reconnecting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kombu import Connection, Exchange, Queue
from kombu.common import ignore_errors
from kombu.message import Message

from kope_web.settings.base import REDIS_TRANSPORT
from tests.runs.test_redis_restart import RedisServer


@pytest.fixture
def redis_down_under_an_unacked_message() -> Iterator[Connection]:
    """A consumer's connection holding one message not yet acknowledged, Redis gone."""
    server = RedisServer()
    server.start()
    connection = Connection(server.url, transport=REDIS_TRANSPORT)
    try:
        queue = Queue("work", Exchange("work", type="direct"), "work")
        received: list[Message] = []
        consumer = connection.Consumer([queue], callbacks=[lambda _, m: received.append(m)])
        consumer.consume()
        with connection.Producer() as producer:
            producer.publish({"task": 1}, exchange=queue.exchange, routing_key="work",
                             declare=[queue])  # fmt: skip
        connection.drain_events(timeout=5)
        assert len(received) == 1 and not received[0].acknowledged
        server.shutdown()
        yield connection
    finally:
        server.stop()


def test_closing_a_collected_connection_with_an_unacked_message_is_a_connection_error(
    redis_down_under_an_unacked_message: Connection,
) -> None:
    connection = redis_down_under_an_unacked_message
    connection._do_close_transport()  # the end of Connection.collect(), as the worker calls it
    ignore_errors(connection, connection.close)  # what the worker does next: no other error
