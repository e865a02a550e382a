"""Fixtures for the browser tests: a `make run` child process, its data dir, and Chromium."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

if TYPE_CHECKING:
    from apps.accounts.models import Membership

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
READY_LINE = re.compile(
    r"KOPE Workbench is ready at (?P<url>http://\S+/) \(started in (?P<seconds>[0-9.]+) s\)"
)
ADMIN_USERNAME = "admin"


class MakeRun:
    """One `make run` in its own session, its output (stdout and stderr) kept line by line."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            ["make", "run"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._collect_output, daemon=True)
        self._reader.start()

    def _collect_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_until_ready(self, timeout_s: float = 120) -> tuple[str, float]:
        """Return the URL and the start-up seconds from the ready line."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := READY_LINE.search(line):
                    return match["url"], float(match["seconds"])
            if self.process.poll() is not None:
                pytest.fail(
                    f"make run exited ({self.process.returncode}) before it was ready:\n"
                    f"{self.output}"
                )
            time.sleep(0.1)
        pytest.fail(f"make run was not ready within {timeout_s} s:\n{self.output}")

    def press_ctrl_c(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to the whole foreground process group."""
        os.killpg(self.process.pid, signal.SIGINT)

    def wait_for_exit(self, timeout_s: float = 60) -> int:
        try:
            returncode = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make run did not stop within {timeout_s} s of Ctrl-C:\n{self.output}")
        self._reader.join(timeout=5)
        return returncode

    def kill_if_running(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self._reader.join(timeout=5)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def postmaster_pid_file(data_dir: Path) -> Path:
    return data_dir / "pgdata" / "postmaster.pid"


def stop_leftover_postgres(data_dir: Path) -> None:
    """Safety net after a killed run: pgserver only stops the server when its users exit."""
    pid_file = postmaster_pid_file(data_dir)
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
    deadline = time.monotonic() + 10
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Short on purpose: the postgres unix socket path must stay under ~100 characters.
    path = Path(tempfile.mkdtemp(prefix="kr", dir="/tmp"))
    yield path
    stop_leftover_postgres(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def admin_password() -> str:
    return secrets.token_urlsafe(16)


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def make_run_env(data_dir: Path, port: int, admin_password: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        # Settings and servers of the surrounding pytest run must not leak into `make run`.
        if name not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL"}
    }
    env.update(
        KOPE_DATA_DIR=str(data_dir),
        KOPE_HOST="127.0.0.1",
        KOPE_PORT=str(port),
        KOPE_ADMIN_USERNAME=ADMIN_USERNAME,
        KOPE_ADMIN_PASSWORD=admin_password,
        DJANGO_SETTINGS_MODULE="kope_web.settings.local",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def start_make_run(make_run_env: dict[str, str]) -> Iterator[Callable[[], MakeRun]]:
    """Start `make run`; every run started is killed at teardown if it is still up."""
    runs: list[MakeRun] = []

    def start() -> MakeRun:
        run = MakeRun(make_run_env)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill_if_running()


@pytest.fixture
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def script_errors(page: Page) -> list[str]:
    """The errors the page's scripts log or throw from now on, filled in as they happen."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def log_in(page: Page, url: str, membership: Membership, path: str) -> None:
    """Log in through the login page (the factories' password), which then opens `path`."""
    page.goto(f"{url}/accounts/login/?next={path}")
    submit_login(page, membership)


def submit_login(page: Page, membership: Membership) -> None:
    """Fill in the login page shown with the member's name and the factories' password."""
    page.locator("#id_username").fill(membership.user.username)
    page.locator("#id_password").fill("pw-for-tests")
    page.get_by_role("button", name="Log in").click()
    # The click returns once the next page starts loading; its deferred scripts (the forest's
    # keyboard tree, say) run only by its load event, and a key pressed before then missed them.
    page.wait_for_load_state("load")
