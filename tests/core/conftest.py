"""Fixtures of the tests of the core: servers that misbehave."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def unanswering_port() -> Iterator[int]:
    """A loopback port whose server never answers, as a wedged one: its accept queue is full,
    so a new connection's handshake never completes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    queued = [socket.socket() for _ in range(3)]
    for connection in queued:  # the later ones never complete: not waited for
        connection.setblocking(False)
        connection.connect_ex(("127.0.0.1", port))
    yield port
    for connection in queued:
        connection.close()
    server.close()
