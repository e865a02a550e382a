"""`make load`'s harness: honest figures and clear refusals, without the whole stack.

The locustfile runs for real (a locust process) against a plain loopback HTTP server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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
