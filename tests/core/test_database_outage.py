"""PostgreSQL going away while a session runs on real workers (Daphne, an agent and a device
worker, Redis between them): the web answers 503 with a readable page and a JSON error, the
workers wait and retry with backoff, and when the database is back the session finishes
with every iteration recorded once.

The processes reach PostgreSQL through a TCP link this test owns (in front of the test
server's unix socket); cutting it is, to every client, the server stopping: connections in
use are reset and new ones are refused. Stopping the shared test server itself would take
the rest of the test run with it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from apps.memory.models import Case, JournalEvent
from apps.runs.models import OptimizationSession
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import small_vector_add
from tests.processes import celery_worker, daphne, session_story, wait_until
from tests.workbench.test_live_events import process_env, require_redis

pytestmark = pytest.mark.redis
ROUNDS = 3


class DatabaseLink:
    """127.0.0.1:<port> forwarded to PostgreSQL's unix socket, until it is cut."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.port = 0
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self.lock:
            sockets, self.open = self.open, []
            listener, self.listener = self.listener, None
        for item in [*sockets, *([listener] if listener else [])]:
            with contextlib.suppress(OSError):
                item.shutdown(socket.SHUT_RDWR)
            item.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.socket_path)
            with self.lock:
                self.open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for item in (source, sink):
            with contextlib.suppress(OSError):
                item.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def link(transactional_db: None) -> Iterator[DatabaseLink]:
    settings = connection.settings_dict
    path = Path(settings["HOST"]) / f".s.PGSQL.{settings['PORT'] or 5432}"
    link = DatabaseLink(str(path))
    link.start()
    yield link
    link.cut()


def env_through(link: DatabaseLink) -> dict[str, str]:
    """The many-hosts environment with the database reached over the link."""
    database = connection.settings_dict["NAME"]
    return process_env("many-hosts") | {
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{link.port}/{database}",
        "KOPE_DB_CONN_MAX_AGE": "0",
    }


def get(url: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (loopback only)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def create_session(url: str, headers: dict[str, str], team: str = "outage") -> int:
    """A small session over the API (the web process queues it on its broker)."""
    body = {"operators": ["vector_add_small"], "budgets": {"rounds": ROUNDS, "plateau": ROUNDS},
            "measurement": {"seeds": 1, "warmup": 1, "repeats": 5}}  # fmt: skip
    request = urllib.request.Request(  # noqa: S310 (loopback only)
        f"{url}/api/teams/{team}/sessions", method="POST", data=json.dumps(body).encode(),
        headers={**headers, "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return int(json.load(response)["id"])


@pytest.mark.timeout(600)  # the waits below, on a slow host
def test_a_database_outage_is_a_503_and_the_running_session_waits_then_finishes(
    link: DatabaseLink,
) -> None:
    require_redis()
    small_vector_add()
    membership = MembershipFactory(team=TeamFactory(slug="outage"), role=Role.ENGINEER)
    browser = Client()
    browser.force_login(membership.user)
    page_headers = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    token = api_token_create(user=membership.user, name="outage").plaintext
    api_headers = {"Authorization": f"Bearer {token}"}
    env = env_through(link)

    with (
        daphne(env) as url,
        celery_worker(env, "agent", "agent@outage") as agent,
        celery_worker(env, "device.cpu", "device@outage"),
    ):
        assert get(f"{url}/api/me", api_headers)[0] == 200
        session_id = create_session(url, api_headers)
        journal = JournalEvent.objects.filter(session_id=session_id)
        wait_until(lambda: journal.filter(kind="case_recorded").exists(), 120, "a first case",
                   lambda: session_story(session_id))  # fmt: skip

        link.cut()
        status, body, headers = get(f"{url}/t/outage/sessions/", page_headers)
        assert status == 503 and "The database cannot be reached right now" in body
        assert "Traceback" not in body and headers["Retry-After"] == "5"
        status, body, _ = get(f"{url}/api/me", api_headers)
        assert status == 503 and json.loads(body)["error"]["code"] == "database_unavailable"
        time.sleep(4)  # the workers meet the outage: their tasks fail and are retried
        link.start()

        assert wait_until(lambda: get(f"{url}/api/me", api_headers)[0] == 200, 30, "the web")
        finished = wait_until(
            lambda: OptimizationSession.objects.filter(
                pk=session_id, status=OptimizationSession.Status.FINISHED
            ).first(),
            240, "the session to finish",
            lambda: f"{session_story(session_id)}\nthe agent worker said:\n{agent.output[-3000:]}",
        )  # fmt: skip
    assert finished is not None and not journal.filter(kind="session_paused").exists()
    iterations = sorted(journal.filter(kind="iteration_started").values_list(
        "payload__iteration", flat=True))  # fmt: skip
    assert iterations == list(range(ROUNDS)), "each iteration started once"
    cases = Case.objects.filter(session_id=session_id)
    assert sorted(cases.values_list("iteration", flat=True)) == list(range(ROUNDS))
    assert journal.filter(kind="case_recorded").count() == ROUNDS
