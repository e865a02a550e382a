"""A Redis server that never answers (wedged, or its accept queue full): without timeouts a
publish waits on it for minutes, and with it the request that launched a session (the Celery
broker) or the worker that sends a session's live event (the channel layer). With them the
publish fails after KOPE_REDIS_TIMEOUT, and what sent it goes on as it does when Redis is
down: the launch answers with its session queued, the event is read from the journal later."""

from __future__ import annotations

from tests.core.scripts import django_script

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


def test_publishing_to_a_redis_that_never_answers_fails_after_the_timeout(
    unanswering_port: int,
) -> None:
    redis_url = f"redis://127.0.0.1:{unanswering_port}/0"
    result = django_script(PUBLISH, {"REDIS_URL": redis_url, "KOPE_REDIS_TIMEOUT": "1"},
                           dropped="KOPE_REDIS", waiting="publishing to a Redis that never answers",
                           timeout=90)  # fmt: skip
    assert "advance sent False" in result.stdout, result.stderr[-2000:]
    assert "done" in result.stdout, result.stderr[-2000:]
    assert "Timeout connecting to server" in result.stderr
