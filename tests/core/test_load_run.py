"""`make load`'s harness: honest figures and clear refusals, without the whole stack.

The locustfile runs for real (a locust process) against a plain loopback HTTP server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from loadtest.summary import summarize

ROOT = Path(__file__).resolve().parents[2]


class NotJson(BaseHTTPRequestHandler):
    """Every address answers 200 with an HTML page, the API's included."""

    def do_GET(self) -> None:
        body = b"<html><body>not the API</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotJson)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_task_that_raises_is_counted_as_an_error(tmp_path: Path, html_server: str) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "team": "load",
                "viewers": ["cookie"],
                "reviewers": [{"cookie": "cookie", "token": "token", "rules": [2]}],
                "sessions": [1],
            }
        )
    )
    samples = tmp_path / "samples.json"
    env = {**os.environ, "LOAD_PLAN": str(plan), "LOAD_SAMPLES": str(samples),
           "LOAD_REVIEWERS": "1", "LOAD_WATCHERS": "0", "LOAD_BROWSERS": "0"}  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtest" / "locustfile.py"),
         "--headless", "--only-summary", "-u", "1", "-r", "1", "-t", "2s",
         "--host", html_server, "--stop-timeout", "1", "--loglevel", "CRITICAL"],
        cwd=ROOT, env=env, capture_output=True, timeout=60, check=False,
    )  # fmt: skip

    # The reviewer reads the rule with .json(): an HTML answer makes its task raise.
    summary = summarize("tiny", {"reviewers": 1}, 2, json.loads(samples.read_text()))

    assert summary.errors >= 1
    assert summary.aims["zero errors"] is False
    assert any("TASK Reviewer task: JSONDecodeError" in m for m in summary.error_samples)


def refusal(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m loadtest.run ARGS`, with a setting that breaks anything past the argument
    check (Django's setup, the database): a refused argument exits 2 before it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOPE_", "DJANGO_"))}
    env["KOPE_EVAL_THREADS"] = "not-a-number"
    return subprocess.run(
        [sys.executable, "-m", "loadtest.run", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # locust reads -t 0s as no time limit at all
        (["--seconds", "0"], "argument --seconds: must be a whole number of 1 or more, got '0'"),
        (["--seconds", "-5"], "argument --seconds: must be a whole number of 1 or more, got '-5'"),
        (["--rounds", "0"], "argument --rounds: must be a whole number of 1 or more, got '0'"),
    ],
)
def test_a_length_below_one_is_refused_before_anything_starts(
    args: list[str], message: str
) -> None:
    result = refusal(*args)

    assert (result.returncode, result.stdout) == (2, ""), result.stderr[-2000:]
    assert message in result.stderr


def test_a_report_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    """Not after six minutes of load, when writing it fails with a traceback."""
    missing = tmp_path / "no-such-folder" / "report.json"

    into_missing = refusal("--report", str(missing))
    onto_folder = refusal("--report", str(tmp_path))

    assert (into_missing.returncode, onto_folder.returncode) == (2, 2), into_missing.stderr
    assert f"argument --report: {missing.parent} is not a folder" in into_missing.stderr
    assert f"argument --report: {tmp_path} is a folder, not a file" in onto_folder.stderr


def test_a_stack_process_that_stops_early_is_named_with_its_log(tmp_path: Path) -> None:
    """The logs are in the data folder, which the run removes as it exits: the failure must
    show them, not point at an output above that was never printed."""
    from loadtest.run import free_port, spawn, wait_for_stack

    web = spawn(tmp_path, "web", ["-c", "import sys; sys.exit('Error: port 8000 is in use')"])
    web.wait(timeout=30)

    with pytest.raises(SystemExit) as stopped:
        wait_for_stack(f"http://127.0.0.1:{free_port()}", {"web": web}, tmp_path)

    message = str(stopped.value)
    assert "the web stopped (exit code 1)" in message
    assert "Error: port 8000 is in use" in message
    assert "see its output above" not in message


def children_once_locust_runs(pid: int) -> list[psutil.Process]:
    """Daphne, the workers and their pools, and locust (started just after the line that
    names the profile)."""
    for _ in range(300):
        children = psutil.Process(pid).children(recursive=True)
        if any("locust" in " ".join(child.cmdline()) for child in children):
            return children
        time.sleep(0.1)
    raise AssertionError("locust did not start")


def test_sigterm_stops_the_stack_and_removes_the_data_folder() -> None:
    """`timeout make load`, or a CI job cancelled: as Ctrl-C, nothing is left running."""
    from kope_web.embedded_db import postmasters_of

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOPE_", "DJANGO_"))}
    run = subprocess.Popen(
        [sys.executable, "-m", "loadtest.run", "--profiles", "tiny", "--seconds", "120",
         "--rounds", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert run.stdout is not None
    data_dir, family, output = None, [], []
    try:
        for line in run.stdout:
            output.append(line)
            if line.startswith("Starting the database"):
                data_dir = Path(line.split(" in ")[-1].strip().rstrip("…"))
            if line.startswith("Running profile tiny"):
                break
        assert data_dir is not None and run.poll() is None, "".join(output)
        family = children_once_locust_runs(run.pid)
        family += postmasters_of(data_dir / "pgdata")

        run.send_signal(signal.SIGTERM)
        run.wait(timeout=90)
        _, left = psutil.wait_procs(family, timeout=30)

        assert [p.pid for p in left] == []
        assert not data_dir.exists()
    finally:  # what a failing run left behind
        if run.poll() is None:
            run.kill()
        run.wait(timeout=30)
        if data_dir is not None:
            family += postmasters_of(data_dir / "pgdata")
        for process in family:
            with contextlib.suppress(psutil.Error):
                process.kill()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
