"""`make run`: the whole single-machine stack in one command, stopped by one Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, NoReturn

import psutil
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from apps.core.parent_death import die_with_parent
from apps.devices.workers import known_queues
from kope_web import embedded_db

READY_TIMEOUT_S = 90
STOP_GRACE_S = 15
KILL_WAIT_S = 5
FIRST_BACKOFF_S = 1.0  # a child that dies is started again after this, doubled each time
MAX_BACKOFF_S = 60.0
STEADY_AFTER_S = 60.0  # one that ran this long before it died starts from FIRST_BACKOFF_S
WATCH_EVERY_S = 0.5


class Command(BaseCommand):
    help = "Start database, migrations, first admin, web server and workers; Ctrl-C stops all."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=settings.KOPE_HOST, help="default: KOPE_HOST")
        parser.add_argument(
            "--port", type=port_number, default=settings.KOPE_PORT, help="default: KOPE_PORT"
        )
        parser.add_argument("--no-worker", action="store_true", help="web server only, no workers")

    def handle(self, *args: Any, host: str, port: int, no_worker: bool, **options: Any) -> None:
        started_at = float(os.environ.get("KOPE_STARTED_AT") or time.time())
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stop_like_ctrl_c)
        ensure_port_free(host, port)
        children: list[Child] = []
        # Ctrl-C may come at any stage: while the database starts, in the middle of the
        # migrations (each is one transaction, so the next start finishes them), while the
        # suite loads, or while the children start. Each ends the same way.
        try:
            self.say("Starting the database…")
            connection.ensure_connection()
            stop_if_asked()
            call_command("bootstrap", stdout=self.stdout)
            stop_if_asked()
            children.append(Child("web server", functools.partial(spawn_web, host, port)))
            if not no_worker:
                children += worker_children()
            stop_if_asked()
            url = url_of(host, port)
            wait_until_answering(url + "accounts/login/", [child.process for child in children])
            elapsed = time.time() - started_at
            self.say(
                f"KOPE Workbench is ready at {url} (started in {elapsed:.1f} s). Ctrl-C stops it."
            )
            supervise(children, self.say)
        except BaseException as error:
            CLEANING_UP.set()
            if not caused_by_ctrl_c(error):
                raise
            self.say("\nStopping…")
        finally:
            CLEANING_UP.set()
            stop_all([child.process for child in children])
            with contextlib.suppress(Exception):  # a connection cut off mid-query
                connection.close()
            self.say_who_keeps_the_database_up()
        self.say("Stopped.")

    def say_who_keeps_the_database_up(self) -> None:
        """The embedded server stops when its last user exits: this process, unless another
        one (a `manage.py shell`, a second checkout's worker) still uses the same data dir."""
        if not settings.EMBEDDED_DATABASE:
            return
        others = embedded_db.other_users(str(settings.DATA_DIR))
        if others:
            self.say(
                f"The embedded database keeps running for {len(others)} other "
                f"process(es) using {settings.DATA_DIR}: {', '.join(others)}. "
                "It stops when the last of them exits."
            )

    def say(self, message: str) -> None:
        self.stdout.write(message)
        self.stdout.flush()


STOP_REQUESTED = threading.Event()
CLEANING_UP = threading.Event()
STOP_NOW = threading.Event()  # Ctrl-C during the clean-up: what is left is killed, not waited for


def stop_like_ctrl_c(signum: int, frame: object) -> None:
    # SIGTERM would otherwise end the process without running the cleanup below, leaving the
    # children and the embedded database running. The flag is for a KeyboardInterrupt that
    # lands where Python swallows it (a finalizer, a logging lock): the next check raises it.
    if CLEANING_UP.is_set():
        # Raised there, a second Ctrl-C cut the clean-up short: a traceback, and the children
        # and the embedded database left running. It hurries the clean-up instead.
        STOP_NOW.set()
        return
    STOP_REQUESTED.set()
    raise KeyboardInterrupt


def caused_by_ctrl_c(error: BaseException) -> bool:
    """A KeyboardInterrupt, or an error it caused on its way out: Ctrl-C in the middle of a
    migration's commit leaves the connection mid-transaction, and the rollback that follows
    fails with a database error of its own."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def stop_if_asked() -> None:
    if STOP_REQUESTED.is_set():
        raise KeyboardInterrupt


def port_number(text: str) -> int:
    """The --port option's type: 0 would have the server listen where no one looks for it."""
    if not text.isdecimal() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port number (1 to 65535)")
    return int(text)


def ensure_port_free(host: str, port: int) -> None:
    family, address = listening_address(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise CommandError(f"Cannot listen on {host}:{port}: {error.strerror}.") from None
            raise CommandError(
                f"Port {port} on {host} is already in use (another `make run`?).\n"
                f"Hint: stop that process, or start on another port: KOPE_PORT={port + 1} make run"
            ) from None


def listening_address(host: str, port: int) -> tuple[socket.AddressFamily, Any]:
    """The family and address Daphne listens on for `host`: an IPv6 one (`::1`) too."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (TypeError, UnicodeError):  # socket cannot encode the name (an empty label)
        raise CommandError(f"Cannot listen on {host!r}: not a host name or address.") from None
    except socket.gaierror as error:
        raise CommandError(f"Cannot listen on {host!r}: {error.strerror}.") from None
    family, _, _, _, address = found[0]
    return family, address


def url_of(host: str, port: int) -> str:
    """The address a browser opens: an IPv6 literal goes in brackets."""
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    # If this supervisor is killed outright, the kernel sends SIGTERM to its children.
    return subprocess.Popen(
        [sys.executable, *args],
        preexec_fn=functools.partial(die_with_parent, os.getpid(), signal.SIGTERM),
        start_new_session=True,
    )


def spawn_web(host: str, port: int) -> subprocess.Popen[bytes]:
    return _spawn(["-m", "daphne", "-b", host, "-p", str(port), "kope_web.asgi:application"])


def worker_children() -> list[Child]:
    """The agent worker and the device worker apart: an agent task waits for its evaluation,
    so with one pool for both, two running sessions would leave no process to evaluate."""
    device_queues = [q for q in known_queues() if q.startswith("device.")]
    agent = functools.partial(spawn_celery, settings.AGENT_QUEUE, "agent@%h", concurrency=2)
    device = functools.partial(spawn_celery, ",".join(device_queues), "device@%h", concurrency=1)
    return [Child("agent worker", agent), Child("device worker", device)]


def spawn_celery(queues: str, hostname: str, *, concurrency: int) -> subprocess.Popen[bytes]:
    return _spawn(["-m", "celery", "-A", "kope_web", "worker", "-Q", queues, "--concurrency",
                   str(concurrency), "--hostname", hostname, "--loglevel", "INFO"])  # fmt: skip


def wait_until_answering(url: str, children: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        stop_if_asked()
        for child in children:
            if child.poll() is not None:
                raise CommandError(f"{describe(child)} exited early; see its output above.")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise CommandError(f"{url} did not answer within {READY_TIMEOUT_S} s.")


class Child:
    """A process of the stack, started again after it dies. The web server too: it keeps
    nothing a new one lacks (sessions and events are in the database, a page's socket
    reconnects), and a stack that stopped for it would stop every running session."""

    def __init__(self, name: str, spawn: Callable[[], subprocess.Popen[bytes]]) -> None:
        self.name, self.spawn = name, spawn
        self.backoff_s = FIRST_BACKOFF_S
        self.start()

    def start(self) -> None:
        self.process = self.spawn()
        self.started_at = time.monotonic()
        self.restart_at: float | None = None

    def watch(self, say: Callable[[str], None]) -> None:
        """Restart it once its back-off is over; a death is said when it is seen."""
        if self.restart_at is None and has_exited(self.process):
            self.bury(say)
        elif self.restart_at is not None and time.monotonic() >= self.restart_at:
            self.start()

    def bury(self, say: Callable[[str], None]) -> None:
        """End what it left running (a worker's pool processes, which would go on holding
        their tasks' locks), then wait its back-off: doubled while it keeps dying young."""
        with contextlib.suppress(ProcessLookupError):  # its group may be empty already
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        if time.monotonic() - self.started_at >= STEADY_AFTER_S:
            self.backoff_s = FIRST_BACKOFF_S
        reason = exit_reason(self.process.returncode)
        say(f"{self.name} exited ({reason}); restarting in {self.backoff_s:g} s")
        self.restart_at = time.monotonic() + self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, MAX_BACKOFF_S)


def supervise(children: list[Child], say: Callable[[str], None]) -> NoReturn:
    """Until Ctrl-C, which ends a back-off wait too: the children are started again as they
    die, one's back-off not holding up another's."""
    while True:
        stop_if_asked()
        for child in children:
            child.watch(say)
        time.sleep(WATCH_EVERY_S)


def has_exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether it has exited, leaving it unreaped: until it is reaped its pid cannot be given
    to another process, so its process group can be killed without hitting a stranger."""
    try:
        found = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already
        return True
    return found is not None


def exit_reason(returncode: int) -> str:
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def describe(child: subprocess.Popen[bytes]) -> str:
    args = [str(arg) for arg in child.args]  # type: ignore[union-attr]
    return f"{' '.join(args[1:4])} (exit code {child.returncode})"


def stop_all(children: list[subprocess.Popen[bytes]], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to each child, then wait for it and for everything it started (a Celery
    worker's pool processes, a kernel's sandbox) up to the grace period; kill what is left.
    A pool process that outlived its worker would still be counted as a database user."""
    family = [process for child in children for process in descendants(child)]
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        if not exited_by(child, deadline):
            child.kill()
            child.wait()
    _, left = psutil.wait_procs(family, timeout=max(0.1, time_left(deadline)))
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=KILL_WAIT_S)


def exited_by(child: subprocess.Popen[bytes], deadline: float) -> bool:
    """Whether the child exits before the deadline, or before a second Ctrl-C."""
    while child.poll() is None and time_left(deadline) > 0:
        time.sleep(0.05)
    return child.poll() is not None


def time_left(deadline: float) -> float:
    return 0.0 if STOP_NOW.is_set() else deadline - time.monotonic()


def descendants(child: subprocess.Popen[bytes]) -> list[psutil.Process]:
    try:
        return list(psutil.Process(child.pid).children(recursive=True))
    except psutil.Error:
        return []
