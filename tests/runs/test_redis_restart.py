"""Redis restarted while a session runs on real workers and two watchers follow it over
websockets (the many-hosts mode: Redis is the broker and the channel layer). The restart is
what an operator's `systemctl restart redis` does: SHUTDOWN SAVE, then start on the same
data. The session finishes, and each watcher ends up with every journal event once, in order:
its socket drops and it reconnects with the last seq it has, or, when the Redis client's own
retries (redis-py backs off up to three times) bridge the restart, the socket stays and a
message lost meanwhile is read back from the journal with the next one.

The test runs its own redis-server on a free port: restarting the machine's Redis would pull
it from under everything else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from apps.memory.models import JournalEvent
from apps.runs.models import OptimizationSession
from apps.runs.tasks import STALLED_AFTER
from tests.browser.conftest import free_port
from tests.core.test_database_outage import create_session
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import small_vector_add
from tests.processes import celery_worker, daphne, wait_until
from tests.workbench.test_live_events import process_env

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server")


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="kope-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
             str(self.dir), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(self.answers, 10, "redis-server to answer")

    def answers(self) -> bool:
        ping = ["redis-cli", "-p", str(self.port), "ping"]
        return subprocess.run(ping, capture_output=True, text=True).stdout.strip() == "PONG"

    def restart(self) -> None:
        """SHUTDOWN SAVE writes the queues to disk; the new server loads them."""
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "save"], check=False)
        assert self.process is not None
        self.process.wait(timeout=10)
        self.start()

    def shutdown(self) -> None:
        """Gone, queues and all, until start() brings it back on the same port."""
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"], check=False)
        assert self.process is not None
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


class Watcher(threading.Thread):
    """A browser's live view: follows the session, reconnecting with the last seq it has."""

    def __init__(self, ws_url: str, cookie: str, origin: str) -> None:
        super().__init__(daemon=True)
        self.ws_url, self.cookie, self.origin = ws_url, cookie, origin
        self.events: list[dict[str, Any]] = []
        self.connections = 0

    def run(self) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not self.finished():
            last = self.events[-1]["seq"] if self.events else 0
            try:
                with connect(f"{self.ws_url}?after={last}", origin=self.origin,
                             additional_headers={"Cookie": self.cookie}) as socket:  # fmt: skip
                    self.connections += 1
                    while not self.finished():
                        event = json.loads(socket.recv(timeout=60))
                        if not self.events or event["seq"] > self.events[-1]["seq"]:
                            self.events.append(event)
            except (ConnectionClosed, OSError, TimeoutError):
                time.sleep(0.5)  # the server is back in a moment

    def finished(self) -> bool:
        return bool(self.events) and self.events[-1]["kind"] == "session_finished"


def test_a_redis_restart_loses_no_event_and_the_session_finishes(
    redis_server: RedisServer, transactional_db: None
) -> None:
    small_vector_add()
    membership = MembershipFactory(team=TeamFactory(slug="restart"), role=Role.ENGINEER)
    browser = Client()
    browser.force_login(membership.user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    token = api_token_create(user=membership.user, name="restart").plaintext
    env = {**process_env("single-machine"), "REDIS_URL": redis_server.url}

    with (
        daphne(env) as url,
        celery_worker(env, "agent", "agent@restart"),
        celery_worker(env, "device.cpu", "device@restart"),
    ):
        session_id = create_session(url, {"Authorization": f"Bearer {token}"}, team="restart")
        ws_url = url.replace("http", "ws") + f"/ws/sessions/{session_id}/"
        watchers = [Watcher(ws_url, cookie, url) for _ in range(2)]
        for watcher in watchers:
            watcher.start()
        journal = JournalEvent.objects.filter(session_id=session_id)
        wait_until(lambda: journal.filter(kind="case_recorded").exists(), 120, "a first case")
        # On a loaded host a watcher's first handshake can still be under way: one that only
        # connects once Redis is back has no socket for the restart to drop.
        wait_until(lambda: all(w.connections for w in watchers), 60, "both watchers to follow")
        redis_server.restart()
        wait_until(
            lambda: OptimizationSession.objects.get(pk=session_id).status == "finished",
            240, "the session to finish after the restart",
        )  # fmt: skip
        for watcher in watchers:
            watcher.join(timeout=60)

    expected = list(journal.order_by("seq").values_list("seq", "kind"))
    for watcher in watchers:
        assert [(e["seq"], e["kind"]) for e in watcher.events] == expected


def test_a_launch_while_redis_is_down_runs_when_the_workers_reconnect(
    redis_server: RedisServer, transactional_db: None
) -> None:
    """The web process answers the launch, but its message never reaches a queue. The
    workers, started before the outage and never restarted, take the session up as they
    reconnect to the broker."""
    small_vector_add()
    membership = MembershipFactory(team=TeamFactory(slug="outage"), role=Role.ENGINEER)
    token = api_token_create(user=membership.user, name="outage").plaintext
    env = {**process_env("single-machine"), "REDIS_URL": redis_server.url}

    with (
        daphne(env) as url,
        celery_worker(env, "agent", "agent@outage") as agent,
        celery_worker(env, "device.cpu", "device@outage"),
    ):
        redis_server.shutdown()
        session_id = create_session(url, {"Authorization": f"Bearer {token}"}, team="outage")
        session = OptimizationSession.objects.get(pk=session_id)
        assert (session.status, session.ticket) == ("queued", 1)
        redis_server.start()
        wait_until(
            lambda: OptimizationSession.objects.get(pk=session_id).status == "finished",
            240, "the session to finish after the workers reconnected",
            explain=lambda: agent.output[-3000:],
        )  # fmt: skip

    assert JournalEvent.objects.filter(session_id=session_id, kind="case_recorded").exists()


def test_a_launch_the_web_process_could_not_send_runs_while_the_workers_stay_connected(
    redis_server: RedisServer, transactional_db: None
) -> None:
    """The web host lost Redis for a moment (here: the web process has a Redis address
    nothing answers at), the workers never did, so none reconnects: an agent worker's sweep
    sends the stalled session's message again. The session is aged instead of waiting
    STALLED_AFTER out; the sweep comes within half a minute."""
    small_vector_add()
    membership = MembershipFactory(team=TeamFactory(slug="blip"), role=Role.ENGINEER)
    token = api_token_create(user=membership.user, name="blip").plaintext
    env = {**process_env("single-machine"), "REDIS_URL": redis_server.url}
    unreachable = f"redis://127.0.0.1:{free_port()}/0"

    with (
        daphne({**env, "REDIS_URL": unreachable}) as url,
        celery_worker(env, "agent", "agent@blip") as agent,
        celery_worker(env, "device.cpu", "device@blip"),
    ):
        session_id = create_session(url, {"Authorization": f"Bearer {token}"}, team="blip")
        launched = OptimizationSession.objects.filter(pk=session_id)
        assert list(launched.values_list("status", "ticket")) == [("queued", 1)]
        launched.update(created_at=timezone.now() - STALLED_AFTER)
        wait_until(
            lambda: launched.get().status == "finished", 240,
            "the session to finish without a worker reconnecting",
            explain=lambda: agent.output[-3000:],
        )  # fmt: skip

    assert "Connection to broker lost" not in agent.output
    assert JournalEvent.objects.filter(session_id=session_id, kind="case_recorded").exists()
