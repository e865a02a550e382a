"""`make run` with its workers killed under it: the device worker mid-evaluation, then the
agent worker mid-session, each with SIGKILL. The stack keeps serving and says each restart,
the session finishes, and the dead evaluation's work dir is gone. No browser: the session is
launched and followed over the API, as a script would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psutil
import pytest

from tests.processes import wait_until

from .conftest import ADMIN_USERNAME, MakeRun

FAST = {"seeds": 1, "warmup": 1, "repeats": 5}
ROUNDS = 4


class Api:
    """The stack's API as its admin, with the session cookie the login page gives."""

    def __init__(self, base_url: str, password: str) -> None:
        self.base = base_url.rstrip("/")
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.opener.open(f"{self.base}/accounts/login/", timeout=30).read()
        form = {"username": ADMIN_USERNAME, "password": password,
                "csrfmiddlewaretoken": self.cookie("csrftoken")}  # fmt: skip
        self.send("/accounts/login/", urlencode(form).encode(), "application/x-www-form-urlencoded")
        assert self.cookie("sessionid"), "the login page did not log the admin in"

    def cookie(self, name: str) -> str:
        return next((c.value or "" for c in self.jar if c.name == name), "")

    def send(self, path: str, body: bytes, content_type: str) -> Any:
        headers = {"Content-Type": content_type, "X-CSRFToken": self.cookie("csrftoken")}
        request = urllib.request.Request(self.base + path, data=body, headers=headers)  # noqa: S310
        with self.opener.open(request, timeout=30) as response:
            return response.read()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return json.loads(self.send(path, json.dumps(body).encode(), "application/json"))

    def get(self, path: str) -> Any:
        with self.opener.open(self.base + path, timeout=30) as response:
            return json.load(response)


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """The stack's own KOPE_EVAL_WORK_DIR, in memory as /dev/shm is: every kope-eval-* in it
    is this stack's. The sandbox user passes through it to its evaluation's folder."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="kope-stack-", dir=base))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def worker_of(run: MakeRun, hostname: str) -> psutil.Process | None:
    """The Celery worker `make run` started as `--hostname hostname` (`device@%h`), not one of
    its pool processes."""
    for process in psutil.Process(run.process.pid).children(recursive=True):
        try:
            if hostname in process.cmdline() and "runstack" in " ".join(process.parent().cmdline()):
                return process
        except psutil.Error:  # ended meanwhile
            continue
    return None


def kill_worker(run: MakeRun, hostname: str) -> None:
    """SIGKILL to the worker alone, as the out-of-memory killer or `kill -9` sends it."""
    worker = worker_of(run, hostname)
    assert worker is not None, f"no {hostname} worker under make run:\n{run.output[-3000:]}"
    worker.send_signal(signal.SIGKILL)


def page_answers(url: str) -> bool:
    with urllib.request.urlopen(f"{url}accounts/login/", timeout=10) as page:  # noqa: S310
        return bool(page.status == 200)


@pytest.mark.timeout(900)
def test_killed_workers_are_restarted_the_session_finishes_and_no_work_dir_is_left(
    start_make_run: Callable[[], MakeRun],
    make_run_env: dict[str, str],
    admin_password: str,
    work_dir: Path,
) -> None:
    make_run_env["KOPE_EVAL_WORK_DIR"] = str(work_dir)
    run = start_make_run()
    url, _ = run.wait_until_ready(timeout_s=180)
    api = Api(url, admin_password)
    body = {"operators": ["vector_add"], "budgets": {"rounds": ROUNDS}, "measurement": FAST,
            "label": "workers killed"}  # fmt: skip
    session = api.post("/api/teams/default/sessions", body)["id"]

    def kinds() -> Counter[str]:
        page = api.get(f"/api/teams/default/sessions/{session}/events?limit=1000")
        return Counter(event["kind"] for event in page["items"])

    def story() -> str:
        status = api.get(f"/api/teams/default/sessions/{session}")
        return f"session {status['status']} {dict(kinds())}\n{run.output[-4000:]}"

    def finished() -> bool:
        return bool(api.get(f"/api/teams/default/sessions/{session}")["status"] == "finished")

    def evaluating_mid_session() -> bool:
        started = any(p.name.startswith("kope-eval-") for p in work_dir.iterdir())
        return started and kinds()["case_recorded"] >= 1

    wait_until(evaluating_mid_session, 300, "an evaluation in flight after the first case", story)
    recorded = kinds()["case_recorded"]
    kill_worker(run, "device@%h")
    wait_until(lambda: "device worker exited (killed by SIGKILL); restarting in 1 s" in run.output,
               30, "make run to say it restarts the device worker", story)  # fmt: skip
    assert page_answers(url)

    wait_until(lambda: kinds()["case_recorded"] > recorded, 300,
               "the session to go on with the new device worker", story)  # fmt: skip
    kill_worker(run, "agent@%h")
    wait_until(lambda: "agent worker exited (killed by SIGKILL); restarting in 1 s" in run.output,
               30, "make run to say it restarts the agent worker", story)  # fmt: skip
    assert page_answers(url)

    wait_until(finished, 400, "the session to finish", story)
    assert page_answers(url)
    left = sorted(p.name for p in work_dir.iterdir())
    assert left == [], f"work dirs left behind: {left}\n{run.output[-4000:]}"
    run.press_ctrl_c()
    run.wait_for_exit(timeout_s=60)
    assert "Stopped." in run.output, run.output[-3000:]
