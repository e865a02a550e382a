"""`make run` keeps serving when one of its processes dies: the process is started again after
a back-off that doubles while it keeps dying young, each restart is said, what the dead one
started goes with it, and Ctrl-C during a back-off stops at once. The children are real
processes; the supervisor's clock is a fake one that each of its waits moves on, so the
back-offs are read exactly, not measured."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from apps.workbench.management.commands import runstack
from apps.workbench.management.commands.runstack import Child, supervise
from tests.processes import wait_until

# Starts a process of its own (as a worker's pool process), says its pid, then dies at once.
DIES_LEAVING_A_CHILD = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
RUNS_UNTIL_KILLED = "import time; time.sleep(600)"


class Clock:
    """runstack's `time`: `sleep` moves `monotonic` on by what it was asked, and waits for
    real only a moment (for the children to run); `on_tick` is called after each."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.on_tick: Callable[[], None] = lambda: None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        time.sleep(0.01)
        self.on_tick()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The fake clock, and `make run`'s own SIGINT handler, for the length of a test."""
    fake = Clock()
    monkeypatch.setattr(runstack, "time", fake)
    before = signal.signal(signal.SIGINT, runstack.stop_like_ctrl_c)
    yield fake
    signal.signal(signal.SIGINT, before)
    runstack.STOP_REQUESTED.clear()


def spawn(script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_dying_child_is_restarted_with_a_doubling_back_off_and_ctrl_c_ends_the_wait(
    clock: Clock,
) -> None:
    said: list[tuple[float, str]] = []
    starts: list[tuple[float, subprocess.Popen[bytes]]] = []

    def started() -> subprocess.Popen[bytes]:
        starts.append((clock.now, spawn(DIES_LEAVING_A_CHILD)))
        return starts[-1][1]

    def say(line: str) -> None:
        said.append((clock.now, line))
        if len(said) == 3:  # Ctrl-C at the start of the third back-off
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        supervise([Child("device worker", started)], say)

    assert [line for _, line in said] == [
        f"device worker exited (killed by SIGKILL); restarting in {delay} s" for delay in (1, 2, 4)
    ]
    assert len(starts) == 3, "started again after Ctrl-C"
    waited = [
        restarted_at - died_at
        for (died_at, _), (restarted_at, _) in zip(said[:2], starts[1:], strict=True)
    ]
    assert waited == [1, 2], "a restart came before its back-off ended, or long after"
    left = [int(process.stdout.readline()) for _, process in starts if process.stdout]
    wait_until(lambda: not [pid for pid in left if running(pid)], 10,
               "what the dead children started to end with them")  # fmt: skip


def test_a_child_that_ran_a_while_before_dying_is_restarted_after_the_first_back_off(
    clock: Clock,
) -> None:
    """Each one lives past STEADY_AFTER_S and is then killed: the back-off does not grow."""
    current: list[tuple[float, subprocess.Popen[bytes]]] = []
    killed: set[int] = set()
    said: list[str] = []

    def started() -> subprocess.Popen[bytes]:
        current[:] = [(clock.now, spawn(RUNS_UNTIL_KILLED))]
        return current[0][1]

    def kill_once_steady() -> None:  # left unreaped: the supervisor is to see it exit
        born, process = current[0]
        if clock.now - born >= runstack.STEADY_AFTER_S and process.pid not in killed:
            killed.add(process.pid)
            os.kill(process.pid, signal.SIGKILL)

    def say(line: str) -> None:
        said.append(line)
        if len(said) == 3:
            signal.raise_signal(signal.SIGINT)

    clock.on_tick = kill_once_steady
    with pytest.raises(KeyboardInterrupt):
        supervise([Child("web server", started)], say)
    assert said == ["web server exited (killed by SIGKILL); restarting in 1 s"] * 3
