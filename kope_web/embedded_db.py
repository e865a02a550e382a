"""The embedded PostgreSQL (with pgvector) used when DATABASE_URL is not set.

The server comes from the `pgserver` package and keeps its data under KOPE_DATA_DIR/pgdata.
Any process that needs the database (manage.py, Daphne, a Celery worker, pytest) starts it
on demand; processes share one server, and the last one out stops it unless `make run` is
holding it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer

logger = logging.getLogger(__name__)
# pgserver keeps its lock under the runtime dir; falling back to /tmp is fine for us.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
UNCLAIMED_STOP_WAIT_S = 10


class EmbeddedDatabaseError(RuntimeError):
    """The embedded database cannot start; the message says why and what to do."""


@functools.cache
def bundled_major_version() -> str:
    from pgserver._commands import POSTGRES_BIN_PATH

    output = subprocess.run(
        [str(POSTGRES_BIN_PATH / "postgres"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # "postgres (PostgreSQL) 16.2" -> "16"
    return output.split()[-1].split(".")[0]


def check_data_dir_version(pgdata: Path) -> None:
    version_file = pgdata / "PG_VERSION"
    if not version_file.exists():
        return
    found = version_file.read_text().strip()
    expected = bundled_major_version()
    if found != expected:
        raise EmbeddedDatabaseError(
            f"The data directory {pgdata} was made by PostgreSQL {found}, "
            f"but the embedded server is PostgreSQL {expected}.\n"
            f"Hint: dump it with PostgreSQL {found}'s pg_dump and restore into a new data dir, "
            f"or move {pgdata} aside to start empty, or point DATABASE_URL at that server."
        )


def remove_stale_lock(pgdata: Path) -> None:
    """A postmaster.pid left by a crashed server blocks start-up when its pid is reused."""
    lock_file = pgdata / "postmaster.pid"
    if not lock_file.exists():
        return
    try:
        pid = int(lock_file.read_text().splitlines()[0])
    except (ValueError, IndexError, OSError):
        pid = -1
    if _is_postgres_process(pid):
        return
    logger.warning("Removing stale lock %s (process %s is not a running postgres).", lock_file, pid)
    lock_file.unlink(missing_ok=True)


def forget_dead_handles(pgdata: Path) -> None:
    """pgserver stops the server when its last user exits, counting users in a pid list.

    A user killed with SIGKILL never removes itself, which would keep the server up forever.
    """
    from pgserver.postgres_server import PostgresServer

    handles = _handles_file(pgdata)
    with PostgresServer._lock:
        if not handles.exists():
            return
        pids = _listed_users(handles)
        handles.write_text(json.dumps([pid for pid in pids if _is_running(pid)]))


def other_users(data_dir: str) -> list[str]:
    """The processes besides this one that keep the embedded server up, as "pid (command)"."""
    from pgserver.postgres_server import PostgresServer

    with PostgresServer._lock:
        pids = _listed_users(_handles_file(Path(data_dir) / "pgdata"))
    return [_describe(pid) for pid in pids if pid != os.getpid() and _is_running(pid)]


def _handles_file(pgdata: Path) -> Path:
    return pgdata / ".handle_pids.json"


def _listed_users(handles: Path) -> list[int]:
    """pgserver's list of the pids using the server; none when it is missing or unreadable."""
    try:
        return list(json.loads(handles.read_text()))
    except (OSError, ValueError):
        return []


def _is_running(pid: int) -> bool:
    """A zombie has exited: only its parent has not collected it yet."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _describe(pid: int) -> str:
    try:
        command = " ".join(psutil.Process(pid).cmdline()[:4])
    except psutil.Error:
        command = "exited"
    return f"{pid} ({command})"


def _is_postgres_process(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).name() == "postgres")
    except (psutil.Error, ValueError):
        return False


@functools.cache
def socket_dir(data_dir: str, database: str) -> str:
    """Start (or join) the embedded server once per process and return its socket directory."""
    pgdata = Path(data_dir) / "pgdata"
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file there, no permission: settings made no folder of it
        raise EmbeddedDatabaseError(
            f"KOPE_DATA_DIR={data_dir!r} cannot hold the embedded database: {error.strerror}."
        ) from None
    check_data_dir_version(pgdata)
    remove_stale_lock(pgdata)
    forget_dead_handles(pgdata)
    initialize_cluster(pgdata)
    server = _start_server(pgdata)
    # Registered after pgserver's own exit handler, so it runs first: users that died without
    # removing themselves (Celery's pool children leave with os._exit) must not keep the
    # server up once this, the last live user, exits.
    atexit.register(forget_dead_handles, pgdata)
    host = str(server.get_postmaster_info().socket_dir)
    create_database(host=host, name=database)
    return host


def initialize_cluster(pgdata: Path) -> None:
    """Run initdb in a staging directory and rename it into place when it has finished.

    pgserver runs initdb in the data dir itself, and initdb writes PG_VERSION long before it
    creates the `postgres` database: a Ctrl-C in between (Python kills the child a quarter of
    a second after the interrupt) left a data dir that every later start took for a whole
    cluster. A rename is atomic: the data dir is either a finished cluster or absent.
    """
    from pgserver.postgres_server import PostgresServer

    with PostgresServer._lock:
        if (pgdata / "PG_VERSION").exists():
            return
        staging = pgdata.with_name(f"{pgdata.name}.initializing")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        _run_initdb(staging)
        # What an earlier interrupted start left here is pgserver's bookkeeping, not data.
        shutil.rmtree(pgdata, ignore_errors=True)
        staging.rename(pgdata)


def _run_initdb(staging: Path) -> None:
    from pgserver import _commands as pg_commands

    initdb = pg_commands.initdb  # type: ignore[attr-defined]  # made when pgserver is imported

    system_user = None
    if os.geteuid() == 0:  # as root pgserver runs PostgreSQL as its own system user
        from pgserver.utils import ensure_prefix_permissions, ensure_user_exists

        system_user = "pgserver"
        ensure_user_exists(system_user)
        ensure_prefix_permissions(staging)
        ensure_prefix_permissions(pg_commands.POSTGRES_BIN_PATH)
        account = pwd.getpwnam(system_user)
        os.chown(staging, account.pw_uid, account.pw_gid)
    try:
        initdb(
            ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
            pgdata=staging,
            user=system_user,
        )
    except subprocess.CalledProcessError as error:
        raise EmbeddedDatabaseError(
            f"initdb could not create a cluster in {staging} (exit {error.returncode}):\n"
            f"{(error.stderr or error.stdout or '').strip()[-2000:]}"
        ) from None


def _start_server(pgdata: Path) -> PostgresServer:
    from pgserver.postgres_server import get_server

    try:
        with _stopped_if_left_unclaimed(pgdata):
            return get_server(pgdata, cleanup_mode="stop")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        log_tail = _tail(pgdata / "log")
        raise EmbeddedDatabaseError(
            f"The embedded PostgreSQL in {pgdata} did not start ({error}).\n"
            f"Last lines of its log:\n{log_tail}\n"
            "Hint: another server may hold this data dir; stop it, or remove the data dir "
            "to start empty."
        ) from None


@contextlib.contextmanager
def _stopped_if_left_unclaimed(pgdata: Path) -> Iterator[None]:
    """pg_ctl starts the postmaster in a session of its own, and pgserver lists this process
    as a user only once the server is ready. An interrupt in between (just after pg_ctl
    returned, or one pg_ctl never saw: Python kills it) or pg_ctl's timeout left a running
    server that no process listed, so none would ever stop it."""
    try:
        yield
    except BaseException:
        stop_unclaimed_server(pgdata)
        raise


def stop_unclaimed_server(pgdata: Path) -> None:
    """Stop the server in `pgdata` unless a live process is listed as its user."""
    from pgserver.postgres_server import PostgresServer

    with PostgresServer._lock:
        if any(_is_running(pid) for pid in _listed_users(_handles_file(pgdata))):
            return
        postmasters = postmasters_of(pgdata)
        for process in postmasters:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
        _, left = psutil.wait_procs(postmasters, timeout=UNCLAIMED_STOP_WAIT_S)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=UNCLAIMED_STOP_WAIT_S)
        remove_stale_lock(pgdata)


def postmasters_of(pgdata: Path) -> list[psutil.Process]:
    """The postmaster is the one postgres process with the data dir on its command line."""
    wanted = {str(pgdata), str(pgdata.resolve())}
    found = []
    for process in psutil.process_iter(attrs=["name", "cmdline"]):
        if process.info["name"] == "postgres" and wanted & set(process.info["cmdline"] or ()):
            found.append(process)
    return found


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def create_database(*, host: str, name: str) -> None:
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
