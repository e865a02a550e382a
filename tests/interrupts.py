"""The state a Ctrl-C leaves a command's database connection in when it lands mid-query."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection


def command_caught_mid_query() -> None:
    """A query sent and never read, as psycopg leaves one interrupted while sending: the next
    query on this connection fails with "another command is already in progress"."""
    connection.ensure_connection()
    connection.connection.pgconn.send_query(b"SELECT pg_sleep(0.1)")
    with pytest.raises(psycopg.OperationalError, match="another command is already in progress"):
        connection.connection.execute("SELECT 1")
