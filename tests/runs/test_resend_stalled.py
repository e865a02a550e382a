"""An agent worker that stays connected to the broker sends a stalled session's message again
(apps/runs/tasks.py `resend_stalled`, every half minute from kope_web.celery.ResendStalled):
only sessions that should be running, that no worker holds and that have not moved for
STALLED_AFTER, and each ticket once, so a backlog is not flooded. The real processes, a
launch the web process's broker refused while the workers stayed connected, are in
tests/runs/test_redis_restart.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from apps.accounts.models import Team
from apps.memory.journal import journal_append
from apps.runs.loop import session_lock
from apps.runs.models import OptimizationSession
from apps.runs.services import enqueue_advance, session_create
from apps.runs.tasks import STALLED_AFTER, resend_stalled, resume_orphaned
from tests.factories import TeamFactory, stored_builtin


@pytest.fixture
def team(db: None) -> Team:
    stored_builtin("gemm")
    team: Team = TeamFactory()
    return team


def session(team: Team, *, quiet: bool = True, **fields: Any) -> int:
    """A launched session (ticket 1; its message is sent only on commit, so never here)."""
    pk = session_create(team=team, user=None, operators=["gemm"]).pk
    made = timezone.now() - (STALLED_AFTER * 2 if quiet else STALLED_AFTER / 2)
    OptimizationSession.objects.filter(pk=pk).update(created_at=made, **fields)
    return pk


def test_only_sessions_that_should_run_and_have_not_moved_are_sent_again(team: Team) -> None:
    stalled = session(team)
    stopping = session(team, status="stopping")
    session(team, quiet=False)  # launched a moment ago: its message may be on its way
    session(team, status="paused")
    session(team, ticket=0)  # made to run in its own process (a benchmark's)
    moving = session(team, status="running")
    journal_append(session_id=moving, kind="session_resumed",
                   payload={"status": "running", "actor": "ada"})  # fmt: skip
    held = session(team)

    with session_lock(held) as locked:  # a worker is on its iteration
        assert locked
        sent = resend_stalled({})

    assert sorted(sent) == sorted([stalled, stopping])


def test_a_ticket_is_sent_again_once_and_a_new_one_again(
    team: Team, django_capture_on_commit_callbacks: Any
) -> None:
    stalled = session(team)
    resent: dict[int, int] = {}

    assert resend_stalled(resent) == [stalled]
    assert resend_stalled(resent) == []  # waiting behind a backlog: not sent a third time
    with django_capture_on_commit_callbacks(execute=True):
        enqueue_advance(stalled)  # a resume, say: ticket 2, which stalls too
    assert resend_stalled(resent) == [stalled]
    assert resent == {stalled: 2}

    OptimizationSession.objects.filter(pk=stalled).update(status="finished")
    assert resend_stalled(resent) == [] and resent == {}


def test_a_connecting_worker_sends_again_what_no_worker_holds_under_its_own_ticket(
    team: Team,
) -> None:
    """At a worker's (re)connection: one waiting in a backlog keeps its place (a new ticket
    would send it to the back and leave its first message dead), and one a worker is on is
    left to it, read without trying its lock (which would turn that worker away)."""
    waiting = session(team, quiet=False)
    held = session(team)
    session(team, status="paused")

    with session_lock(held) as locked:
        assert locked
        assert resume_orphaned() == 1

    tickets = OptimizationSession.objects.filter(pk__in=[waiting, held]).values_list("ticket")
    assert list(tickets) == [(1,), (1,)]
