"""A Redis server that never answers (wedged, or its accept queue full): without timeouts a
publish waits on it for minutes, and with it the request that launched a session (the Celery
broker) or the worker that sends a session's live event (the channel layer). With them the
publish fails after KOPE_REDIS_TIMEOUT, and what sent it goes on as it does when Redis is
down: the launch answers with its session queued, the event is read from the journal later."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.processes import ROOT

PUBLISH = """
import django
django.setup()
from apps.core.events import EventKind, publish_quietly
from apps.runs.services import publish_advance
print("advance sent", publish_advance(1, 1))
publish_quietly("session-1", EventKind.SESSION_EVENT, {"session": 1, "seq": 1, "kind": "x",
                "payload": {}, "at": "", "case": None})
print("done")
"""


def publish_with(redis_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    process_env = {k: v for k, v in os.environ.items() if not k.startswith("KOPE_REDIS")}
    process_env.update(DJANGO_SETTINGS_MODULE="kope_web.settings.local", REDIS_URL=redis_url,
                       **env)  # fmt: skip
    try:
        return subprocess.run([sys.executable, "-c", PUBLISH], cwd=ROOT, env=process_env,
                              capture_output=True, text=True, timeout=90)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("publishing to a Redis that never answers was still waiting at 90 s")


def test_publishing_to_a_redis_that_never_answers_fails_after_the_timeout(
    unanswering_port: int,
) -> None:
    result = publish_with(f"redis://127.0.0.1:{unanswering_port}/0", KOPE_REDIS_TIMEOUT="1")
    assert "advance sent False" in result.stdout, result.stderr[-2000:]
    assert "done" in result.stdout, result.stderr[-2000:]
    assert "Timeout connecting to server" in result.stderr
