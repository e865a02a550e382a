"""Real processes for tests: a Daphne server and Celery workers, on loopback, always stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil

from apps.benchmarks.web import answers

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
        self.terminate()
        self.wait_stopped()

    def terminate(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)

    def wait_stopped(self) -> None:
        """After terminate(): give it 15 s to finish, then kill it."""
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def as_a_terminal_starts_it() -> None:
    """A child's SIGINT as a shell in a terminal leaves it (the default: KeyboardInterrupt),
    for tests that press Ctrl-C. A process started in the background of a script (a CI job
    run as `bash .ci/run &`) ignores SIGINT, and every child inherits that: Ctrl-C did
    nothing to the commands those tests start."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answering(url: str, process: Process, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            break
        if answers(url):
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered; output:\n{process.output[-4000:]}")


@contextmanager
def stopped_on_exit(processes: list[Process]) -> Iterator[None]:
    """Stops every process in the list (as it is at exit) together: all are told first."""
    try:
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait_stopped()


def daphne_process(env: dict[str, str], port: int | None = None) -> tuple[Process, str]:
    """A Daphne server starting (not yet answering) and its URL."""
    port = port or free_port()
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "kope_web.asgi:application"]  # fmt: skip
    return Process(args, env), f"http://127.0.0.1:{port}"


def worker_process(env: dict[str, str], queues: str, hostname: str, pool: str = "solo") -> Process:
    """A Celery worker starting (not yet ready). The solo pool runs tasks in the process that
    talks to the broker: busy, it answers no broadcast; `make run`'s prefork pool does."""
    args = [sys.executable, "-m", "celery", "-A", "kope_web", "worker", "-Q", queues,
            "--pool", pool, "--concurrency", "1", "--hostname", hostname, "--loglevel", "INFO",
            "--without-heartbeat", "--without-mingle", "--without-gossip"]  # fmt: skip
    return Process(args, env)


@contextmanager
def daphne(
    env: dict[str, str], workers: Sequence[tuple[str, str]] = (), port: int | None = None
) -> Iterator[str]:
    """Daphne's URL once it answers, with the (queues, hostname) workers ready too: all start
    at once, since each spends seconds importing Django and the apps."""
    processes: list[Process] = []
    with stopped_on_exit(processes):
        process, url = daphne_process(env, port)
        processes.append(process)
        for queues, hostname in workers:
            processes.append(worker_process(env, queues, hostname))
        wait_until_answering(f"{url}/accounts/login/", process)
        for worker in processes[1:]:
            worker.wait_for_output(" ready.")
        yield url


@contextmanager
def celery_worker(
    env: dict[str, str], queues: str, hostname: str, pool: str = "solo"
) -> Iterator[Process]:
    processes = [worker_process(env, queues, hostname, pool)]
    with stopped_on_exit(processes):
        processes[0].wait_for_output(" ready.")
        yield processes[0]


def wait_until(
    condition: Callable[[], Any], timeout: float, what: str,
    explain: Callable[[], str] | None = None,
) -> Any:  # fmt: skip
    """Poll `condition` until it returns something true, and return that; on time out, the
    message ends with what `explain` says about the state things were left in."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.05)
    state = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{state}")


def session_story(session_id: int, last: int = 15) -> str:
    """A session's status and its latest journal events, seconds after the first one."""
    from apps.memory.models import JournalEvent
    from apps.runs.models import OptimizationSession

    session = OptimizationSession.objects.get(pk=session_id)
    journal = JournalEvent.objects.filter(session_id=session_id)
    first = journal.order_by("seq").first()
    latest = list(journal.order_by("-seq")[:last])[::-1]
    lines = [f"session {session_id}: {session.status} ({session.status_reason or 'no reason'})"]
    for event in latest:
        elapsed = (event.created_at - first.created_at).total_seconds() if first else 0.0
        lines.append(f"  +{elapsed:7.1f} s  {event.kind} {event.payload.get('iteration', '')}")
    return "\n".join(lines)


def descendant(pid: int, matches: Callable[[psutil.Process], bool]) -> psutil.Process | None:
    """A process under process `pid` that `matches`, if there is one now."""
    for process in psutil.Process(pid).children(recursive=True):
        with suppress(psutil.Error, ProcessLookupError):  # one that ended meanwhile
            if matches(process):
                return process
    return None


def still_running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def end(process: psutil.Process) -> None:
    """Kill `process` if it still runs: a test that found it running leaves no orphan behind."""
    with suppress(psutil.Error):
        process.kill()
