"""`make run`: the whole single-machine stack in one command, stopped by one Ctrl-C."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from apps.devices.workers import known_queues

READY_TIMEOUT_S = 90
STOP_GRACE_S = 15
PR_SET_PDEATHSIG = 1


class Command(BaseCommand):
    help = "Start database, migrations, first admin, web server and worker; Ctrl-C stops all."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=settings.KOPE_HOST)
        parser.add_argument("--port", type=int, default=settings.KOPE_PORT)
        parser.add_argument("--no-worker", action="store_true", help="web server only")

    def handle(self, *args: Any, host: str, port: int, no_worker: bool, **options: Any) -> None:
        started_at = float(os.environ.get("KOPE_STARTED_AT") or time.time())
        signal.signal(signal.SIGTERM, stop_like_ctrl_c)
        ensure_port_free(host, port)
        self.say("Starting the database…")
        connection.ensure_connection()
        call_command("bootstrap", stdout=self.stdout)
        children = [spawn_web(host, port)]
        if not no_worker:
            children.append(spawn_worker())
        try:
            url = f"http://{host}:{port}/"
            wait_until_answering(url + "accounts/login/", children)
            elapsed = time.time() - started_at
            self.say(
                f"KOPE Workbench is ready at {url} (started in {elapsed:.1f} s). Ctrl-C stops it."
            )
            wait_for_first_exit(children)
        except KeyboardInterrupt:
            self.say("\nStopping…")
        finally:
            stop_all(children)
            connection.close()
        self.say("Stopped.")

    def say(self, message: str) -> None:
        self.stdout.write(message)
        self.stdout.flush()


def stop_like_ctrl_c(signum: int, frame: object) -> None:
    # SIGTERM would otherwise end the process without running the cleanup below,
    # leaving the children and the embedded database running.
    raise KeyboardInterrupt


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise CommandError(f"Cannot listen on {host}:{port}: {error.strerror}.") from None
            raise CommandError(
                f"Port {port} on {host} is already in use (another `make run`?).\n"
                f"Hint: stop that process, or start on another port: KOPE_PORT={port + 1} make run"
            ) from None


def _die_with_parent() -> None:
    # If this supervisor is killed outright, the kernel sends SIGTERM to its children.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        preexec_fn=_die_with_parent,
        start_new_session=True,
    )


def spawn_web(host: str, port: int) -> subprocess.Popen[bytes]:
    return _spawn(["-m", "daphne", "-b", host, "-p", str(port), "kope_web.asgi:application"])


def spawn_worker() -> subprocess.Popen[bytes]:
    queues = ",".join(known_queues())
    return _spawn(
        [
            "-m",
            "celery",
            "-A",
            "kope_web",
            "worker",
            "-Q",
            queues,
            "--concurrency",
            "2",
            "--hostname",
            "local@%h",
            "--loglevel",
            "INFO",
        ]
    )


def wait_until_answering(url: str, children: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
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


def wait_for_first_exit(children: list[subprocess.Popen[bytes]]) -> None:
    while all(child.poll() is None for child in children):
        time.sleep(0.5)
    gone = next(child for child in children if child.returncode is not None)
    raise CommandError(f"{describe(gone)} stopped.")


def describe(child: subprocess.Popen[bytes]) -> str:
    args = [str(arg) for arg in child.args]  # type: ignore[union-attr]
    return f"{' '.join(args[1:4])} (exit code {child.returncode})"


def stop_all(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
