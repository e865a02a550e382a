"""A team using the workbench, for locust (run by `python -m loadtest.run`, see its docstring).

- SessionWatcher: a browser on a live session page: loads it, opens the websocket with the
  page's last seq, and refetches the page parts the live script refetches on progress and
  context events. Each live event's delay is its arrival minus its journal time (`at`, set
  when the event row is written; it is sent after its transaction commits).
- ForestBrowser: forests, cases, compares, knowledge searches, the sessions list.
- Reviewer: the review queue, a rule's page (which reserves it), then approve or veto over
  the API; each reviewer decides only its own share of the rules.

The driver passes the seeded team in the JSON file LOAD_PLAN and the user counts in
LOAD_WATCHERS, LOAD_BROWSERS and LOAD_REVIEWERS; every sample goes to LOAD_SAMPLES at exit,
with each task that raised counted as a failure (kind TASK).
"""

# ruff: noqa: S311 (a load generator picks pages at random; nothing secret)
from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
from datetime import UTC, datetime
from typing import Any

import gevent
from locust import FastHttpUser, between, constant, events, task
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

PLAN: dict[str, Any] = json.loads(open(os.environ["LOAD_PLAN"]).read())  # noqa: SIM115
TEAM = PLAN["team"]
OPERATORS = ["relu", "vector_add", "gelu", "sigmoid", "axpby"]
QUERIES = ["parallel loop", "vectorize elementwise", "unroll", "fast math gelu", "tiling", ""]
PROGRESS = {"incumbent_replaced", "operator_finished", "session_finished"}
CONTEXT = {"context_assembled", "candidate_proposed"}
CASE_LINK = re.compile(r"/cases/(\d+)/")
LAST_SEQ = re.compile(r'data-last-seq="(\d+)"')

SAMPLES: dict[str, dict[str, Any]] = {}
ERRORS: dict[str, int] = {}
RECEIVE_S = 5.0


@events.request.add_listener
def keep_sample(
    request_type: str, name: str, response_time: float, exception: Any = None, **kwargs: Any
) -> None:
    entry = SAMPLES.setdefault(
        f"{request_type} {name}", {"kind": request_type, "name": name, "times": [], "failures": 0}
    )
    if exception is None:
        entry["times"].append(response_time)
        return
    entry["failures"] += 1
    message = f"{request_type} {name}: {exception}"[:300]
    ERRORS[message] = ERRORS.get(message, 0) + 1


@events.user_error.add_listener
def keep_task_error(user_instance: Any, exception: Exception, **kwargs: Any) -> None:
    """A task that raised (an answer it could not read, say) is an error of the run too."""
    user = getattr(user_instance, "user", user_instance)  # locust passes the task set
    error = RuntimeError(f"{type(exception).__name__}: {exception}")
    fire("TASK", f"{type(user).__name__} task", 0, error)


@events.quitting.add_listener
def save_samples(**kwargs: Any) -> None:
    errors = [f"{n} x {message}" for message, n in sorted(ERRORS.items(), key=lambda i: -i[1])]
    with open(os.environ["LOAD_SAMPLES"], "w") as out:
        json.dump({"requests": SAMPLES, "errors": errors}, out)


def fire(kind: str, name: str, elapsed_ms: float, exception: Exception | None = None) -> None:
    events.request.fire(
        request_type=kind,
        name=name,
        response_time=elapsed_ms,
        response_length=0,
        exception=exception,
        context={},
    )


class TeamMember(FastHttpUser):
    abstract = True
    cookie = ""

    @property
    def base_url(self) -> str:
        if not self.host:
            raise RuntimeError("no host: start locust with --host http://127.0.0.1:PORT")
        return self.host

    def page(self, path: str, name: str, **headers: str) -> str:
        """GET a page that must answer 200 (a redirect to the login page is a failure)."""
        with self.client.get(
            path,
            name=name,
            allow_redirects=False,
            catch_response=True,
            headers={"Cookie": f"sessionid={self.cookie}", **headers},
        ) as reply:
            if reply.status_code != 200:
                reply.failure(f"HTTP {reply.status_code}")
                return ""
            return reply.text or ""


class SessionWatcher(TeamMember):
    fixed_count = int(os.environ.get("LOAD_WATCHERS", "0"))
    wait_time = constant(0)
    numbers = itertools.count()

    def on_start(self) -> None:
        n = next(self.numbers)
        self.cookie = PLAN["viewers"][n % len(PLAN["viewers"])]
        self.session = PLAN["sessions"][n % len(PLAN["sessions"])]
        self.path = f"/t/{TEAM}/sessions/{self.session}/"
        self.socket: ClientConnection | None = None
        self.last_seq = 0
        self.opened_at = datetime.now(UTC)

    def on_stop(self) -> None:
        if self.socket is not None:
            self.socket.close()

    @task
    def watch(self) -> None:
        if self.socket is None:
            self.open()
        deadline = time.monotonic() + RECEIVE_S
        while self.socket is not None and time.monotonic() < deadline:
            try:
                message = self.socket.recv(timeout=0.5)
            except TimeoutError:
                continue
            except ConnectionClosed as closed:
                fire("WS", "connection", 0, closed)
                self.socket = None
                return
            self.received(json.loads(message))
        if self.socket is None:
            gevent.sleep(1)  # the page's reconnect back-off

    def open(self) -> None:
        found = LAST_SEQ.search(self.page(self.path, "session page"))
        if not found:
            return  # no page, no socket: try again after the back-off
        self.last_seq = max(self.last_seq, int(found.group(1)))
        url = self.base_url.replace("http", "ws", 1) + f"/ws/sessions/{self.session}/"
        started = time.perf_counter()
        try:
            self.socket = connect(
                f"{url}?after={self.last_seq}",
                origin=Origin(self.base_url),
                additional_headers={"Cookie": f"sessionid={self.cookie}"},
                open_timeout=10,
            )
        except Exception as error:
            fire("WS", "connect", (time.perf_counter() - started) * 1000, error)
            return
        fire("WS", "connect", (time.perf_counter() - started) * 1000)
        self.opened_at = datetime.now(UTC)

    def received(self, event: dict[str, Any]) -> None:
        delay = datetime.now(UTC) - datetime.fromisoformat(event["at"])
        if event["seq"] != self.last_seq + 1:
            fire("WS", "event order", 0, ValueError(f"seq {event['seq']} after {self.last_seq}"))
        self.last_seq = event["seq"]
        # Events written before the socket opened come from the journal (catch-up): counted,
        # but their age is not a delivery delay.
        live = datetime.fromisoformat(event["at"]) >= self.opened_at
        fire("WS", "event delay" if live else "catch-up event", delay.total_seconds() * 1000)
        for kinds, part in ((PROGRESS, "operators"), (CONTEXT, "context")):
            if event["kind"] in kinds:  # the live script refetches this part
                gevent.spawn(
                    self.page,
                    f"{self.path}?part={part}",
                    f"session part={part}",
                    **{"HX-Request": "true"},
                )


class ForestBrowser(TeamMember):
    fixed_count = int(os.environ.get("LOAD_BROWSERS", "0"))
    wait_time = between(1, 3)
    numbers = itertools.count()

    def on_start(self) -> None:
        self.cookie = PLAN["viewers"][next(self.numbers) % len(PLAN["viewers"])]
        self.cases: list[str] = []

    @task(3)
    def forest(self) -> None:
        text = self.page(f"/t/{TEAM}/forest/?operator={random.choice(OPERATORS)}", "forest")
        self.cases = CASE_LINK.findall(text) or self.cases

    @task(3)
    def case(self) -> None:
        if self.cases:
            self.page(f"/t/{TEAM}/cases/{random.choice(self.cases)}/", "case")

    @task(1)
    def compare(self) -> None:
        if len(self.cases) >= 2:
            a, b = random.sample(self.cases, 2)
            self.page(f"/t/{TEAM}/compare/?a={a}&b={b}", "compare")

    @task(2)
    def knowledge(self) -> None:
        self.page(f"/t/{TEAM}/knowledge/?q={random.choice(QUERIES)}", "knowledge search")

    @task(1)
    def sessions(self) -> None:
        self.page(f"/t/{TEAM}/sessions/", "sessions list")


class Reviewer(TeamMember):
    fixed_count = int(os.environ.get("LOAD_REVIEWERS", "0"))
    wait_time = between(2, 5)
    numbers = itertools.count()

    def on_start(self) -> None:
        mine = PLAN["reviewers"][next(self.numbers) % len(PLAN["reviewers"])]
        self.cookie, self.token = mine["cookie"], mine["token"]
        self.rules: list[int] = list(mine["rules"])

    @task
    def review(self) -> None:
        self.page(f"/t/{TEAM}/review/?status=pending", "review queue")
        if not self.rules:
            self.page(f"/t/{TEAM}/hot-memory/", "hot memory")
            return
        rule_id = self.rules.pop(0)
        self.page(f"/t/{TEAM}/review/{rule_id}/", "rule page")  # reserves it for this reviewer
        api = f"/api/teams/{TEAM}/rules/{rule_id}"
        headers = {"Authorization": f"Bearer {self.token}"}
        rule = self.client.get(api, name="API rule", headers=headers).json()
        if rule.get("status") != "pending":
            return  # decided in an earlier profile
        if rule_id % 2:
            body: dict[str, Any] = {"reason": "too narrow for the load team"}
            self.client.post(f"{api}/veto", name="API veto", json=body, headers=headers)
        else:
            body = {"version": 1, "comment": "fine"}
            self.client.post(f"{api}/approve", name="API approve", json=body, headers=headers)
