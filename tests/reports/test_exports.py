"""Exports as a team asks for them: small ones inline, large ones by the agent worker's task,
each made once; suite figures and comparisons from the database."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.core.errors import DomainError, NotFound
from apps.memory.models import Case
from apps.operators.services import suite_set
from apps.reports import services
from apps.reports.collect import comparison_report, session_report
from apps.reports.models import Export
from apps.reports.services import export_execute, export_request
from apps.reports.tasks import make_export
from apps.runs.services import session_create
from tests.factories import MembershipFactory, stored_builtin
from tests.reports.sessions import journal_session

SECRET = "sk-ant-api03-PLANTED-IN-A-STRATEGY-0123456789"


def test_a_suite_report_counts_unfinished_operators_as_failures(team: Team) -> None:
    session = journal_session(team, best={"gemm": 5.0, "relu": 40.0}, unfinished=("cumsum",))

    summary = session_report(session)["sessions"][0]["summary"]

    assert summary["operators"] == 3 and summary["finished"] == 2
    assert summary["pass_rate"] == pytest.approx(2 / 3)
    # vs PyTorch: 20/5 = 4 and 20/40 = 0.5; vs the naive 10 ms start: 2 and 0.25
    assert summary["geomean_speedup_vs_reference"] == pytest.approx(math.sqrt(4 * 0.5))
    assert summary["geomean_speedup_vs_naive"] == pytest.approx(math.sqrt(2 * 0.25))
    assert summary["fraction_faster_than_reference"] == pytest.approx(1 / 3)
    assert summary["median_self_acceleration"] == pytest.approx(0.25)


def test_a_session_over_a_suite_gives_a_suite_report(team: Team) -> None:
    relu = stored_builtin("relu")
    suite_set(team=team, slug="pair", name="A pair", operators=[relu.operator])
    session = session_create(team=team, user=None, suite="pair", start=False)

    data = session_report(session)

    assert data["report"]["title"] == f"Suite report: A pair, session {session.pk}"
    assert data["sessions"][0]["session"]["suite"]["slug"] == "pair"
    assert data["sessions"][0]["summary"]["pass_rate"] == 0.0  # relu never ran: a failure


def test_two_sessions_side_by_side_give_the_effect_of_b_over_a(team: Team) -> None:
    off = journal_session(team, mode="off", best={"gemm": 5.0, "relu": 40.0})
    on = journal_session(team, mode="read_write", best={"gemm": 2.5, "relu": 40.0})

    data = comparison_report(off, on)

    assert [r["ratio_a_over_b"] for r in data["comparison"]["operators"]] == [2.0, 1.0]
    assert data["comparison"]["effect_of_b_over_a"] == pytest.approx(math.sqrt(2.0))
    assert data["report"]["title"] == (f"Comparison: session {off.pk} (off) vs session {on.pk} "
                                       "(read_write)")  # fmt: skip


def test_a_secret_that_reached_the_journal_is_redacted_from_the_report(
    team: Team, settings
) -> None:
    settings.ANTHROPIC_API_KEY = SECRET
    session = journal_session(team, best={"gemm": 5.0})
    Case.objects.filter(session_id=session.pk, iteration=1).update(strategy=f"tile, key {SECRET}")
    text = json.dumps(session_report(session))
    assert SECRET not in text and "tile, key [redacted]" in text


@pytest.fixture
def viewer(team: Team) -> object:
    return MembershipFactory(team=team, role=Role.VIEWER).user


def test_a_small_export_is_made_in_the_request(team: Team, viewer: object) -> None:
    session = journal_session(team, best={"gemm": 5.0})

    export = export_request(team=team, user=viewer, kind="session", fmt="md",
                            params={"session": str(session.pk)})  # fmt: skip

    assert export.status == "done" and export.progress == 100 and export.created_by == viewer
    assert export.filename.startswith(f"session-{session.pk}-") and export.filename.endswith(".md")
    assert bytes(export.content).decode().startswith(f"# Session report: session {session.pk}")
    assert export.content_type.startswith("text/markdown") and export.size == len(export.content)


def test_a_large_export_is_queued_after_commit_and_the_worker_makes_it_once(
    team: Team,
    viewer: object,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
    eager_tasks: None,
) -> None:
    monkeypatch.setattr(services, "INLINE_ROWS", 0)
    session = journal_session(team, best={"gemm": 5.0})

    with django_capture_on_commit_callbacks() as callbacks:
        export = export_request(team=team, user=viewer, kind="session", fmt="csv",
                                params={"session": session.pk})  # fmt: skip
        assert Export.objects.get(pk=export.pk).status == "queued"
    assert len(callbacks) == 1
    callbacks[0]()  # the commit: the task runs (eagerly, as a worker would)

    export.refresh_from_db()
    assert export.status == "done" and export.progress == 100 and export.started_at
    assert bytes(export.content).decode().startswith("row,session,memory_mode,operator")
    made_at = export.finished_at
    make_export(export.pk)  # delivered again: nothing is made twice
    assert export_execute(export.pk) is None
    export.refresh_from_db()
    assert export.finished_at == made_at


def test_an_export_whose_worker_died_is_taken_up_again_but_a_live_one_is_not(
    team: Team, viewer: object
) -> None:
    session = journal_session(team, best={"gemm": 5.0})
    live = Export.objects.create(
        team=team,
        kind="session",
        format="json",
        status="running",
        params={"session": session.pk},
        started_at=timezone.now(),
    )
    dead = Export.objects.create(team=team, kind="session", format="json", status="running",
                                 params={"session": session.pk},
                                 started_at=timezone.now() - timedelta(hours=1))  # fmt: skip

    assert export_execute(live.pk) is None
    assert export_execute(dead.pk) == "done"
    assert Export.objects.get(pk=live.pk).status == "running"


def test_a_message_a_killed_worker_gave_back_looks_again_once_its_export_counts_as_lost(
    team: Team,
) -> None:
    """A worker killed mid-export gives its message back (acks_late), delivered again at once:
    the export is running and not yet lost, so nothing takes it. The task queues itself, on
    the real broker, for the moment the export counts as lost."""
    session = journal_session(team, best={"gemm": 5.0})
    started = timezone.now() - timedelta(minutes=5)
    export = Export.objects.create(team=team, kind="session", format="json", status="running",
                                   params={"session": session.pk}, started_at=started)  # fmt: skip
    queue = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])  # type: ignore[index]
    before = set(queue.iterdir())

    make_export(export.pk)  # as a worker runs the message

    sent = [path for path in queue.iterdir() if path not in before]
    messages = [json.loads(path.read_bytes()) for path in sent]
    for path in sent:
        path.unlink()  # or a later test's agent worker would take it
    assert Export.objects.get(pk=export.pk).status == "running"
    [headers] = [m["headers"] for m in messages if m["headers"]["task"] == "reports.make_export"]
    assert headers["argsrepr"] == f"({export.pk},)"
    due = datetime.fromisoformat(headers["eta"]) - (started + services.STALE)
    assert timedelta(0) < due < timedelta(seconds=30)


def test_a_database_blip_mid_export_is_retried_by_the_task_which_takes_its_export_back(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database away for a moment (injected: the collector's first read raises) is not the
    export's failure: the task retries, and its retry takes up the export it left running."""
    session = journal_session(team, best={"gemm": 5.0})
    export = Export.objects.create(team=team, kind="session", format="json",
                                   params={"session": session.pk})  # fmt: skip
    reads = []

    def away_once(read: Any) -> dict[str, Any]:
        reads.append(read)
        if len(reads) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return session_report(read)

    monkeypatch.setattr(services, "session_report", away_once)
    make_export.apply(args=[export.pk])  # as its worker runs it, retries included

    export.refresh_from_db()
    assert export.status == "done" and not export.error and len(reads) == 2


def test_an_export_that_breaks_is_failed_with_the_reason(team: Team, viewer: object) -> None:
    session = journal_session(team, best={"gemm": 5.0})
    export = Export.objects.create(team=team, kind="session", format="json",
                                   params={"session": session.pk + 1000})  # fmt: skip
    assert export_execute(export.pk) == "failed"
    export.refresh_from_db()
    assert export.error == f"No session {session.pk + 1000!r}." and export.progress_text == "failed"


def test_another_teams_session_cannot_be_exported(
    team: Team, other_team: Team, viewer: object
) -> None:
    theirs = journal_session(other_team, best={"gemm": 5.0})
    with pytest.raises(NotFound):
        export_request(team=team, user=viewer, kind="session", fmt="json",
                       params={"session": theirs.pk})  # fmt: skip
    assert not Export.objects.exists()


@pytest.mark.parametrize(
    ("kind", "fmt", "message"),
    [("knowledge", "pdf", "a knowledge export comes as md, json, not 'pdf'"),
     ("profile", "json", "no export of kind 'profile'")],
)  # fmt: skip
def test_a_kind_or_format_that_does_not_exist_is_refused(
    team: Team, viewer: object, kind: str, fmt: str, message: str
) -> None:
    with pytest.raises(DomainError) as error:
        export_request(team=team, user=viewer, kind=kind, fmt=fmt, params={})
    assert str(error.value).startswith(message)


def test_an_outsider_cannot_ask_for_an_export(
    team: Team, member: Callable[[Role | str], object]
) -> None:
    with pytest.raises(NotFound):
        export_request(team=team, user=member("outsider"), kind="knowledge", fmt="json",
                       params={})  # fmt: skip
