"""A message crosses from a Celery worker process to a browser's websocket, in both modes.

Single machine: filesystem broker + channel layer over the embedded PostgreSQL.
Many hosts: Redis for both, and the database reached through DATABASE_URL.
Every piece is a real process: Daphne, the worker, and a websocket client.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from tests.factories import MembershipFactory, TeamFactory
from tests.processes import celery_worker, daphne


def redis_url_for_this_process() -> str:
    """The database REDIS_URL_FOR_TESTS names for the first pytest-xdist process, one lower
    for each next one (15, 14, ...): a test flushes its database."""
    url = urlsplit(os.environ.get("REDIS_URL_FOR_TESTS", "redis://127.0.0.1:6379/15"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    first = int(url.path.strip("/") or 0)
    if first < index:
        raise ValueError(f"REDIS_URL_FOR_TESTS names database {first}, too low for test "
                         f"process {index}: name a higher one or run fewer processes")  # fmt: skip
    return urlunsplit(url._replace(path=f"/{first - index}"))


REDIS_URL = redis_url_for_this_process()
ANSWER = re.compile(r'data-check="(\w+)" data-queue="([\w.]+)" data-hostname="([^"]+)"')


def redis_available() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def require_redis() -> None:
    if redis_available():
        redis.Redis.from_url(REDIS_URL).flushdb()
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"Redis is not answering at {REDIS_URL}; .ci/run should have started it.")
    pytest.skip(f"Redis is not answering at {REDIS_URL}")


def process_env(mode: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL"}}
    env["DJANGO_SETTINGS_MODULE"] = "kope_web.settings.test"
    database = connection.settings_dict["NAME"]  # the test database, already migrated
    if mode == "single-machine":
        env["KOPE_DB_NAME"] = database
    else:
        host = connection.settings_dict["HOST"]
        env["DATABASE_URL"] = f"postgresql://postgres:@/{database}?host={host}"
        env["REDIS_URL"] = REDIS_URL
    return env


@pytest.mark.parametrize(
    "mode", ["single-machine", pytest.param("many-hosts", marks=pytest.mark.redis)]
)
def test_a_worker_answer_reaches_a_connected_browser(mode: str, transactional_db: None) -> None:
    if mode == "many-hosts":
        require_redis()
    membership = MembershipFactory(team=TeamFactory(slug="live"), role=Role.ENGINEER)
    browser = Client()
    browser.force_login(membership.user)
    session_cookie = f"sessionid={browser.cookies['sessionid'].value}"
    token = api_token_create(user=membership.user, name="script").plaintext
    env = process_env(mode)
    hostname = f"{mode}-worker@test"

    with daphne(env) as url, celery_worker(env, "agent,device.cpu", hostname):
        ws_url = url.replace("http", "ws") + "/ws/teams/live/"
        with connect(ws_url, additional_headers={"Cookie": session_cookie}, origin=url) as socket:
            check = post_check(url, token)
            answers = {receive_answer(socket) for _ in check["queues"]}

    assert answers == {(check["check_id"], queue, hostname) for queue in check["queues"]}
    assert check["queues"] == ["agent", *(f"device.{t}" for t in settings.DEVICE_TARGETS)]


def post_check(url: str, token: str) -> dict[str, object]:
    import json
    import urllib.request

    request = urllib.request.Request(  # noqa: S310 (loopback only)
        f"{url}/api/teams/live/workers/check",
        method="POST",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        assert response.status == 202
        return dict(json.load(response))


def receive_answer(socket) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    message = socket.recv(timeout=30)
    found = ANSWER.search(message)
    assert found, message
    return found.group(1), found.group(2), found.group(3)


def test_a_socket_for_another_teams_events_is_refused(transactional_db: None) -> None:
    TeamFactory(slug="theirs")
    membership = MembershipFactory(role=Role.ADMIN)
    browser = Client()
    browser.force_login(membership.user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    env = process_env("single-machine")
    with daphne(env) as url:
        ws_url = url.replace("http", "ws") + "/ws/teams/theirs/"
        with (
            connect(ws_url, additional_headers={"Cookie": cookie}, origin=url) as socket,
            pytest.raises(ConnectionClosed) as closed,
        ):
            socket.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
