"""PostgreSQL advisory locks, keyed (namespace, id): one process at a time on a row's work
(a session's iteration, an import), let go by the database when that process dies."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import DatabaseError, connection


@contextlib.contextmanager
def advisory_lock(namespace: int, key: int) -> Iterator[bool]:
    """Try the lock on this connection: yields whether it was taken, and lets it go after."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [namespace, key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            # A connection gone (DatabaseError) took the lock with it.
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [namespace, key])


def advisory_locks_held(namespace: int) -> set[int]:
    """The keys of the namespace some process holds, read from pg_locks without trying them:
    trying one would turn away the worker that came for it at that moment."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s"
            " AND objsubid = 2 AND database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())", [namespace],
        )  # fmt: skip
        return {int(objid) for (objid,) in cursor.fetchall()}
