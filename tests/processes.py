"""Real processes for tests: a Daphne server and Celery workers, on loopback, always stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Process:
    """A child process whose merged output is collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.popen = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_output(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"never printed {text!r}; output:\n{self.output[-4000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answering(url: str, process: Process, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (loopback only)
                return
        except urllib.error.HTTPError:
            return  # it answered
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise AssertionError(f"{url} never answered; output:\n{process.output[-4000:]}")


@contextmanager
def daphne(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    process = Process(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "kope_web.asgi:application",
        ],
        env,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_answering(f"{url}/accounts/login/", process)
        yield url
    finally:
        process.stop()


@contextmanager
def celery_worker(env: dict[str, str], queues: str, hostname: str) -> Iterator[Process]:
    process = Process(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "kope_web",
            "worker",
            "-Q",
            queues,
            "--pool",
            "solo",
            "--hostname",
            hostname,
            "--loglevel",
            "INFO",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        env,
    )
    try:
        process.wait_for_output(" ready.")
        yield process
    finally:
        process.stop()
