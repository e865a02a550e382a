"""Reference runners kept warm: each a `refrun --warm` process with PyTorch imported, serving one
request at a time in a child it forks for it.

A fresh runner spent about 1.3 s importing PyTorch before every request (`manage.py bench
reference` measures what that costs an evaluation), and that time counted against the
reference's limit. A child forked from a warm runner starts at once, in a session of its own,
confined by the reference step's policy (apps/sandbox/policies.py) as a fresh one is; its
time limit starts with it. The runner runs an interpreter the sandbox user can read
(apps/sandbox/interpreter.py), with nothing of the worker's environment. A runner that died
(killed, out of memory) is replaced and the request sent once more: a request only writes
files that it writes again.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from apps.sandbox.interpreter import sandbox_python

REPLY_MARGIN_S = 30  # beyond the request's own limit: the runner's start and the child's exit
MAX_IDLE = 2  # runners kept between requests, each with PyTorch in memory (about 230 MB)
SUPPORTED = hasattr(os, "pidfd_open")  # how a runner waits for its child: Linux 5.3 and later
ROOT = Path(__file__).resolve().parents[2]


def reference_env(threads: int) -> dict[str, str]:
    """What a reference process gets beside the sandbox's base environment."""
    return {
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sandbox_python()[1]]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": str(threads),
    }


def runner_env() -> dict[str, str]:
    """The warm runner's: each child it forks sets its request's thread count and TMPDIR."""
    return {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C", "LC_ALL": "C",
            **reference_env(threads=1)}  # fmt: skip


class RunnerGone(RuntimeError):
    """The runner exited or stopped answering; the message says what it last wrote."""


class WarmRunner:
    def __init__(self) -> None:
        # Unbuffered files and pipes: a buffered one has a lock, which a process forked while
        # another thread held it would wait on forever when it closes its copy (forget(), or
        # the garbage collector after it).
        # What the runner itself says (an import that failed), kept for its last words.
        self.errors: IO[bytes] = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115 (close())
        self.process = subprocess.Popen(
            [sandbox_python()[0], "-s", "-m", "apps.operators.refrun", "--warm"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
            cwd=ROOT, env=runner_env(), bufsize=0,
        )  # fmt: skip

    def serve(self, order: dict[str, Any]) -> dict[str, Any]:
        """How the child that served `order` ended: {"returncode", "timed_out"}."""
        assert self.process.stdin is not None and self.process.stdout is not None
        unsent = memoryview(json.dumps(order).encode() + b"\n")
        try:
            while unsent:
                unsent = unsent[self.process.stdin.write(unsent) or 0 :]
        except OSError:
            raise RunnerGone(self.last_words()) from None
        wait_s = float(order["timeout_s"]) + REPLY_MARGIN_S
        answered = select.select([self.process.stdout], [], [], wait_s)[0]
        line = self.process.stdout.readline() if answered else b""
        if not line:
            raise RunnerGone(self.last_words() or f"no answer within {wait_s:g} s")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def last_words(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace").strip()[-500:]

    def close(self) -> None:
        """Closing its stdin ends it; one that does not end is killed."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.errors.close()

    def forget(self) -> None:
        """In a forked child: close this process's copies of the pipes, leave the runner be."""
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.process.returncode = 0  # not this process's child: nothing to wait for


class RunnerPool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[WarmRunner] = []
        self.every: set[WarmRunner] = set()

    def serve(self, order: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.serve_once(order)
        except RunnerGone:
            return self.serve_once(order)  # on a new runner

    def serve_once(self, order: dict[str, Any]) -> dict[str, Any]:
        runner = self.take()
        try:
            reply = runner.serve(order)
        except BaseException:  # gone, or in a state nobody knows
            self.drop(runner)
            raise
        self.give_back(runner)
        return reply

    def take(self) -> WarmRunner:
        with self.lock:
            while self.idle:
                runner = self.idle.pop()
                if runner.process.poll() is None:
                    return runner
                self.every.discard(runner)
                runner.close()
            runner = WarmRunner()
            self.every.add(runner)
            return runner

    def give_back(self, runner: WarmRunner) -> None:
        with self.lock:
            if len(self.idle) < MAX_IDLE:
                self.idle.append(runner)
                return
            self.every.discard(runner)
        runner.close()

    def drop(self, runner: WarmRunner) -> None:
        with self.lock:
            self.every.discard(runner)
        runner.close()

    def forget(self) -> None:
        """In a forked child: the runners are the parent's."""
        for runner in self.every:
            runner.forget()
        self.lock = threading.Lock()
        self.idle, self.every = [], set()


pool = RunnerPool()
os.register_at_fork(after_in_child=pool.forget)
