"""A websocket path no consumer serves is refused with 4404 rather than raising in the
router (Channels' "No route found", a traceback in the server's log)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from apps.workbench.routing import websocket_urlpatterns


@pytest.mark.parametrize(
    "path",
    ["/ws/nope/", "/elsewhere/", "/ws/sessions/x/", f"/ws/sessions/{'9' * 5000}/"],
    ids=["unknown", "outside-ws", "not-a-number", "5000-digits"],
)
def test_a_socket_path_nothing_serves_is_refused_with_4404(
    transactional_db: None, path: str
) -> None:
    async def attempt() -> tuple[bool, int | None]:
        socket = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
        connected, code = await socket.connect(timeout=10)  # a cold first start is slow
        await socket.disconnect()
        return connected, code

    assert async_to_sync(attempt)() == (False, 4404)
