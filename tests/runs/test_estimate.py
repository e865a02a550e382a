"""The launch estimate from real rows: whole rounds of the sessions that finished on this host,
evaluation time only without any, and the work of the sessions ahead in the queue."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.models import Evaluation
from apps.devices.services import kernel_source_store
from apps.memory.journal import journal_append
from apps.operators.models import OperatorVersion
from apps.runs.config import Budgets
from apps.runs.estimate import (
    Pace,
    QueueAhead,
    measured_pace,
    queue_ahead,
    recent_session_pace,
    run_estimate,
)
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import stored_builtin
from tests.memory.test_compare_pages import recorded_case

TIMES = "\N{MULTIPLICATION SIGN}"  # the page writes "4 rounds TIMES 30 s per round"


@pytest.fixture
def relu(db: None) -> OperatorVersion:
    return stored_builtin("relu")


def finished_session(team: Team, version: OperatorVersion, *, rounds: int, seconds: float,
                     policy: str = "offline") -> OptimizationSession:  # fmt: skip
    """A session that started, recorded `rounds` cases and finished `seconds` later."""
    session = session_create(team=team, user=None, operators=["relu"], policy="offline",
                             start=False)  # fmt: skip
    started = journal_append(session_id=session.pk, kind="session_started",
                             step="session:started", payload={"policy": policy,
                             "memory_mode": "read_write", "operators": ["relu"],
                             "target": "cpu-c"})  # fmt: skip
    for iteration in range(rounds):
        recorded_case(session, version, iteration, None, f"/* {iteration} */", "try")
    # finished `seconds` after its start (the journal is append-only: its time stays)
    OptimizationSession.objects.filter(pk=session.pk).update(
        status="finished",
        policy=policy,
        finished_at=started.created_at + timedelta(seconds=seconds),
    )
    return session


def evaluation_of(team: Team, version: OperatorVersion, seconds: float) -> None:
    started = timezone.now()
    Evaluation.objects.create(
        team=team, version=version, target="cpu-c", source=kernel_source_store("int k;"),
        options={}, options_key=str(seconds), status=Evaluation.Status.DONE,
        started_at=started, finished_at=started + timedelta(seconds=seconds))  # fmt: skip


def test_the_pace_is_the_median_seconds_per_round_of_finished_sessions(
    team: Team, other_team: Team, relu: OperatorVersion
) -> None:
    finished_session(team, relu, rounds=4, seconds=40)  # 10 s a round
    finished_session(other_team, relu, rounds=2, seconds=60)  # 30 s: another team, same host
    finished_session(team, relu, rounds=3, seconds=60)  # 20 s
    finished_session(team, relu, rounds=1, seconds=900, policy="claude")  # another policy
    evaluation_of(team, relu, 1)  # far quicker than the rounds: not what is used

    pace = measured_pace(team=team, target="cpu-c", policy="offline")

    assert pace == Pace(seconds_per_round=20, measured_over=3, from_sessions=True)
    assert recent_session_pace(target="cpu-c", policy="claude") == Pace(900, 1, True)


def test_without_a_finished_session_it_falls_back_to_the_teams_evaluation_time(
    team: Team, relu: OperatorVersion
) -> None:
    assert measured_pace(team=team, target="cpu-c", policy="offline") is None
    for seconds in (10, 20, 60):
        evaluation_of(team, relu, seconds)

    pace = measured_pace(team=team, target="cpu-c", policy="offline")

    assert pace == Pace(seconds_per_round=20, measured_over=3, from_sessions=False)


def test_the_queue_ahead_is_what_the_active_sessions_have_left_at_their_pace(
    team: Team, other_team: Team, relu: OperatorVersion
) -> None:
    finished_session(team, relu, rounds=2, seconds=20)  # offline: 10 s a round
    budgets = Budgets(rounds=5)
    running = session_create(team=team, user=None, operators=["relu"], budgets=budgets)
    for iteration in range(2):  # 3 rounds left
        recorded_case(running, relu, iteration, None, f"/* {iteration} */", "try")
    OptimizationSession.objects.filter(pk=running.pk).update(status="running")
    session_create(team=other_team, user=None, operators=["relu"], budgets=budgets)  # 5 left
    session_create(team=team, user=None, operators=["relu"], budgets=budgets, start=False)
    paused = session_create(team=team, user=None, operators=["relu"], budgets=budgets)
    OptimizationSession.objects.filter(pk=paused.pk).update(status="paused")

    ahead = queue_ahead(pace=None)

    # the session run in its own process (never sent) and the paused one wait for nobody
    assert ahead == QueueAhead(sessions=2, seconds=(3 + 5) * 10)


def test_a_session_ahead_without_a_pace_of_its_own_goes_at_the_runs_pace(
    team: Team, relu: OperatorVersion
) -> None:
    session_create(team=team, user=None, operators=["relu"], budgets=Budgets(rounds=4))

    assert queue_ahead(pace=None) == QueueAhead(sessions=1, seconds=None)
    assert queue_ahead(pace=Pace(15, 3, False)) == QueueAhead(sessions=1, seconds=60)


def test_the_estimate_adds_the_queue_ahead_to_the_runs_own_rounds() -> None:
    estimate = run_estimate(operators=2, rounds=30, policy="offline", context_tokens=12_000,
                            token_budget=1_000_000, pace=Pace(9, 20, True),
                            ahead=QueueAhead(sessions=2, seconds=300))  # fmt: skip

    assert estimate.evaluations == 60
    assert estimate.run_seconds == 540
    assert estimate.total_seconds == 840
    unknown = run_estimate(operators=1, rounds=3, policy="offline", context_tokens=12_000,
                           token_budget=1_000_000, pace=None, ahead=QueueAhead(0, 0))  # fmt: skip
    assert unknown.run_seconds is None and unknown.total_seconds is None


def test_the_launch_page_shows_the_parts_of_the_estimate_and_their_basis(
    team: Team, relu: OperatorVersion, client_for: Any
) -> None:
    finished_session(team, relu, rounds=4, seconds=120)  # 30 s a round
    session_create(team=team, user=None, operators=["relu"], budgets=Budgets(rounds=10))
    url = f"/t/{team.slug}/sessions/new/?part=estimate&operators=relu&rounds=20&policy=offline"

    page = client_for(Role.ENGINEER).get(url).content.decode()

    # 20 rounds x 30 s = 10 min, + 10 rounds x 30 s = 5 min ahead
    assert (
        f"Time: about 15 min: 20 rounds {TIMES} 30 s per round as measured over the last 1 "
        "finished session on this host (offline policy, cpu-c), + 5 min for the 1 session "
        "ahead in the queue"
    ) in page
