"""A websocket path no consumer serves is refused with 4404 rather than raising in the
router (Channels' "No route found", a traceback in the server's log)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.typing import Origin

from apps.workbench.routing import websocket_urlpatterns
from tests.processes import daphne
from tests.workbench.test_live_events import process_env


@pytest.mark.parametrize(
    "path",
    ["/ws/nope/", "/elsewhere/", "/ws/sessions/x/", f"/ws/sessions/{'9' * 5000}/"],
    ids=["unknown", "outside-ws", "not-a-number", "5000-digits"],
)
def test_a_socket_path_nothing_serves_is_refused_with_4404(
    transactional_db: None, path: str
) -> None:
    async def attempt() -> tuple[bool, dict[str, Any]]:
        socket = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        connected, _ = await socket.connect(timeout=10)  # a cold first start is slow
        closed = await socket.receive_output(timeout=10)
        await socket.disconnect()
        return connected, closed

    assert async_to_sync(attempt)() == (True, {"type": "websocket.close", "code": 4404})


def test_a_refused_socket_reaches_a_real_client_with_its_close_code(
    transactional_db: None,
) -> None:
    """Closed before its handshake was accepted, a refused socket reached a browser as an
    HTTP 403, which browsers report as 1006 (abnormal closure): the pages' clients took it
    for a dropped connection and tried again for ever, never saying why."""
    with daphne(process_env("single-machine")) as url:
        codes = [close_code(url, path) for path in ["/ws/sessions/1/", "/ws/teams/t/", "/ws/x/"]]
    assert codes == [4403, 4403, 4404]


def close_code(url: str, path: str) -> int | None:
    """The code a refused socket is closed with, as a client on the wire receives it."""
    address = f"ws{url.removeprefix('http')}{path}"
    with (
        connect(address, origin=Origin(url), open_timeout=30) as socket,
        pytest.raises(ConnectionClosed) as closed,
    ):
        socket.recv(timeout=30)
    return closed.value.rcvd.code if closed.value.rcvd else None
