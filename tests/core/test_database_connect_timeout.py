"""A database host that takes the connection and then never answers (a wedged server, or one
whose accept queue is full): without a connect timeout libpq waits for its reply for as long
as TCP keeps the connection, many minutes, and every request and worker task that needs the
database hangs with it instead of answering 503 and retrying."""

from __future__ import annotations

import subprocess

from tests.core.scripts import django_script

CONNECT = """
import django
django.setup()
from django.conf import settings
from django.db import connection
print("options", settings.DATABASES["default"]["OPTIONS"])
connection.ensure_connection()
"""


def connect(database_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Django's first connection, in a process of its own (settings read at start); one that
    hangs fails the test after a minute."""
    return django_script(
        CONNECT,
        {"DATABASE_URL": database_url, **env},
        dropped="KOPE_DB_",
        waiting="the connection to a database that never answers",
        timeout=60,
    )


def test_a_database_that_never_answers_fails_the_connection_after_the_timeout(
    unanswering_port: int,
) -> None:
    url = f"postgresql://kope@127.0.0.1:{unanswering_port}/kope"
    result = connect(url, KOPE_DB_CONNECT_TIMEOUT="2")
    assert result.returncode != 0
    assert "'connect_timeout': 2" in result.stdout
    assert "OperationalError" in result.stderr and "timeout expired" in result.stderr


def test_the_connect_timeout_defaults_to_ten_seconds_and_a_database_url_may_set_its_own(
    unanswering_port: int,
) -> None:
    url = f"postgresql://kope@127.0.0.1:{unanswering_port}/kope"
    assert "'connect_timeout': 10" in connect(url).stdout
    own = connect(f"{url}?connect_timeout=1", KOPE_DB_CONNECT_TIMEOUT="5")
    assert "'connect_timeout': '1'" in own.stdout
    assert "timeout expired" in own.stderr
