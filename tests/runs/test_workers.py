"""Sessions on real processes: Daphne, an agent worker and a device worker, a websocket client;
and an agent worker (or its prefork pool process) killed with SIGKILL in the middle of an
iteration."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from django.test import Client
from kombu.exceptions import OperationalError as BrokerDown
from websockets.sync.client import connect

from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from apps.memory.journal import forest_rebuild
from apps.memory.models import Case, JournalEvent
from apps.runs.config import Budgets, Measurement
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import MembershipFactory, TeamFactory, stored_builtin
from tests.processes import Process, celery_worker, daphne, session_story, wait_until
from tests.workbench.test_live_events import process_env

# Three operators where the first transformations pay far more than timing noise on a busy
# machine: the packed GEMM for gemm and for matmul_bias_relu (which gemm's cases in memory
# steer), vectorized math (-ffast-math) for gelu.
E2E_OPERATORS = ["gemm", "gelu", "matmul_bias_relu"]
KILL_ROUNDS = 3  # the kill lands in iteration 1 or 2, and the session goes on after it
FAST = {"seeds": 1, "warmup": 1, "repeats": 5}


@pytest.fixture(scope="module")
def device_worker(django_db_setup: None) -> Iterator[Process]:
    """One device worker for both sessions: it keeps nothing between evaluations."""
    with celery_worker(process_env("single-machine"), "device.cpu", "device@workers") as worker:
        yield worker


def worker_state(worker: Process) -> str:
    """Said when a wait times out: a worker that died explains a session that stood still."""
    code = worker.popen.poll()
    if code is None:
        return "the device worker is running"
    return f"the device worker exited ({code}); its output ended:\n{worker.output[-3000:]}"


def flags_of(case: Case) -> list[str]:
    proposed = JournalEvent.objects.get(
        session_id=case.session_id, kind="candidate_proposed",
        payload__operator=case.version.operator.slug, payload__iteration=case.iteration,
    )  # fmt: skip
    return list(proposed.payload["flags"])


def create_over_http(url: str, token: str, team: str) -> dict[str, Any]:
    body = {"operators": E2E_OPERATORS, "budgets": {"rounds": 4}, "measurement": FAST,
            "label": "end to end"}  # fmt: skip
    request = urllib.request.Request(  # noqa: S310 (loopback only)
        f"{url}/api/teams/{team}/sessions", method="POST", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        assert response.status == 201
        return dict(json.load(response))


def test_a_session_runs_on_real_workers_and_a_watcher_sees_every_event_in_order(
    device_worker: Process, transactional_db: None
) -> None:
    for slug in E2E_OPERATORS:
        stored_builtin(slug)
    membership = MembershipFactory(team=TeamFactory(slug="e2e"), role=Role.ENGINEER)
    browser = Client()
    browser.force_login(membership.user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    token = api_token_create(user=membership.user, name="ci").plaintext
    env = process_env("single-machine")
    received: list[dict[str, Any]] = []

    with daphne(env, workers=[("agent", "agent@e2e")]) as url:
        created = create_over_http(url, token, "e2e")
        ws_url = url.replace("http", "ws") + f"/ws/sessions/{created['id']}/?after=0"
        with connect(ws_url, additional_headers={"Cookie": cookie}, origin=url) as socket:
            while not received or received[-1]["kind"] != "session_finished":
                received.append(json.loads(socket.recv(timeout=300)))

    session = OptimizationSession.objects.get(pk=created["id"])
    assert session.status == "finished", session.status_reason
    journal = list(JournalEvent.objects.filter(session_id=session.pk).order_by("seq"))
    assert [(e["seq"], e["kind"]) for e in received] == [(e.seq, e.kind) for e in journal]
    assert [e.seq for e in journal] == list(range(1, session.last_seq + 1))

    finished = {e.payload["operator"]: e.payload for e in journal if e.kind == "operator_finished"}
    assert list(finished) == E2E_OPERATORS
    for slug, summary in finished.items():
        start = Case.objects.get(session_id=session.pk, version__operator__slug=slug, iteration=0)
        best = Case.objects.get(pk=summary["best_case_id"])
        assert best.strategy != "starting kernel", slug
        assert (best.source.text, flags_of(best)) != (start.source.text, []), slug
        verdict = best.event.payload["feedback"]
        assert best.correct and "verdict: CORRECT" in verdict["summary"], slug
        assert best.latency_ms < start.latency_ms, (slug, best.latency_ms, start.latency_ms)

    cases = list(Case.objects.filter(session_id=session.pk))
    on_path = {summary["best_case_id"] for summary in finished.values()}
    on_path |= {Case.objects.get(pk=pk).parent_id for pk in set(on_path)}
    branches = [c for c in cases if c.pk not in on_path and c.parent_id is not None]
    assert branches, "the forest keeps the attempts that did not win"
    recorded = [e.pk for e in journal if e.kind == "case_recorded"]
    assert sorted(c.pk for c in cases) == recorded  # a case per case_recorded event
    assert forest_rebuild(session_id=session.pk) == len(cases)  # and the journal rebuilds them


@pytest.mark.timeout(600)  # the two waits below, on a slow host
def test_an_agent_worker_killed_mid_iteration_is_replaced_without_a_duplicate(
    device_worker: Process, transactional_db: None
) -> None:
    session = killable_session()
    env = process_env("single-machine")
    with celery_worker(env, "agent", "agent-1@kill") as first_agent:
        killed_in = wait_until(lambda: mid_iteration(session), 180, "an iteration in flight",
                               lambda: story(session, device_worker))  # fmt: skip
        os.killpg(first_agent.popen.pid, signal.SIGKILL)
        first_agent.popen.wait()
    with celery_worker(env, "agent", "agent-2@kill"):
        wait_until(lambda: finished(session), 300, "the session to finish on the second worker",
                   lambda: story(session, device_worker))  # fmt: skip
    assert_each_iteration_once(session, killed_in)


def test_a_prefork_pool_process_killed_mid_iteration_is_replaced_without_a_duplicate(
    device_worker: Process, transactional_db: None
) -> None:
    """`make run`'s agent worker is a prefork pool: the out-of-memory killer picks the pool
    process running the iteration, not the worker that holds the broker connection. The task
    comes back to a new pool process: acked late, it is rejected back to its queue when its
    pool process is lost (and were it not, the stalled-session sweep would send it again)."""
    session = killable_session()
    env = process_env("single-machine")
    with celery_worker(env, "agent", "agent@prefork", pool="prefork") as agent:
        killed_in = wait_until(lambda: mid_iteration(session), 180, "an iteration in flight",
                               lambda: story(session, device_worker))  # fmt: skip
        pool_process = pool_process_of(agent)
        os.kill(pool_process, signal.SIGKILL)
        wait_until(lambda: finished(session), 300, "the session to finish on a new pool process",
                   lambda: f"{story(session, device_worker)}\n{agent.output[-3000:]}")  # fmt: skip
        assert agent.popen.poll() is None, "the worker itself went down"
        assert pool_process not in children_of(agent.popen.pid)
    assert_each_iteration_once(session, killed_in)


def killable_session() -> OptimizationSession:
    stored_builtin("gemm")
    return session_create(
        team=TeamFactory(),
        user=None,
        operators=["gemm"],
        budgets=Budgets(rounds=KILL_ROUNDS),
        measurement=Measurement(**FAST),
    )


def story(session: OptimizationSession, device_worker: Process) -> str:
    return f"{session_story(session.pk)}\n{worker_state(device_worker)}"


def finished(session: OptimizationSession) -> bool:
    return OptimizationSession.objects.get(pk=session.pk).status == "finished"


def mid_iteration(session: OptimizationSession) -> int | None:
    """The iteration (past the starting kernel's) whose candidate is proposed and not yet
    recorded, if one is."""
    proposed = (
        JournalEvent.objects.filter(
            session_id=session.pk, kind="candidate_proposed", payload__iteration__gte=1
        )
        .order_by("-seq")
        .first()
    )
    if proposed is None:
        return None
    iteration = proposed.payload["iteration"]
    recorded = Case.objects.filter(session_id=session.pk, iteration=iteration).exists()
    return None if recorded else iteration


def children_of(pid: int) -> list[int]:
    return [child.pid for child in psutil.Process(pid).children()]


def pool_process_of(worker: Process) -> int:
    """The one pool process of a prefork worker of concurrency 1."""
    (child,) = children_of(worker.popen.pid)
    return child


def assert_each_iteration_once(session: OptimizationSession, killed_in: int) -> None:
    journal = list(JournalEvent.objects.filter(session_id=session.pk).order_by("seq"))
    assert [e.seq for e in journal] == list(range(1, len(journal) + 1))
    cases = list(Case.objects.filter(session_id=session.pk).order_by("iteration"))
    assert [c.iteration for c in cases] == list(range(KILL_ROUNDS))
    for iteration in range(KILL_ROUNDS):
        steps = [e.kind for e in journal if e.payload.get("iteration") == iteration]
        assert steps.count("iteration_started") == 1, (iteration, steps)
        assert steps.count("candidate_proposed") == 1, (iteration, steps)
        assert steps.count("case_recorded") == 1, (iteration, steps)
    proposed = next(e for e in journal if e.kind == "candidate_proposed"
                    and e.payload["iteration"] == killed_in)  # fmt: skip
    assert cases[killed_in].source.sha256 == proposed.payload["source_sha256"]


def test_a_launch_the_broker_refused_is_run_by_the_next_agent_worker_to_start(
    device_worker: Process, transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was left queued for ever: a starting worker re-queued running sessions only."""
    from apps.runs.tasks import advance_session

    def broker_down(*args: object) -> None:
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    stored_builtin("relu")
    membership = MembershipFactory(role=Role.ENGINEER)
    client = Client()
    client.force_login(membership.user)
    run_here = session_create(team=membership.team, user=None, operators=["relu"], start=False)
    with monkeypatch.context() as down:
        down.setattr(advance_session, "delay", broker_down)
        launched = client.post(f"/api/teams/{membership.team.slug}/sessions", {
            "operators": ["relu"], "budgets": {"rounds": 1}, "measurement": FAST},
            content_type="application/json")  # fmt: skip
    assert launched.status_code == 201

    with celery_worker(process_env("single-machine"), "agent", "agent@refused"):
        wait_until(
            lambda: OptimizationSession.objects.get(pk=launched.json()["id"]).status == "finished",
            180, "the refused launch to run", lambda: session_story(launched.json()["id"]),
        )  # fmt: skip

    run_here.refresh_from_db()
    assert (run_here.status, run_here.last_seq) == ("queued", 0)  # left to its own process
