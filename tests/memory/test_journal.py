"""The journal: append-only in the database, gapless per session, the record the forest is
rebuilt from."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import QuerySet

from apps.accounts.models import Team
from apps.memory.events import PayloadError
from apps.memory.forest import best_per_branch, children_of, path_to, subtree_json
from apps.memory.journal import events_since, forest_rebuild, journal_append
from apps.memory.models import Case, Journal, JournalEvent
from apps.operators.models import OperatorVersion
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import stored_builtin
from tests.processes import ROOT
from tests.workbench.test_live_events import process_env


@pytest.fixture
def session(team: Team) -> OptimizationSession:
    return OptimizationSession.objects.create(team=team, target="cpu-c", label="test")


@pytest.fixture
def version(db: None) -> OperatorVersion:
    return stored_builtin("softmax_rows")


def record(
    session: OptimizationSession, version: OperatorVersion, iteration: int, **fields: Any
) -> Case:
    payload = {"iteration": iteration, "version_id": version.pk, "target": "cpu-c",
               "strategy": f"attempt {iteration}", "outcome": "improved", "correct": True,
               **fields}  # fmt: skip
    event = journal_append(session_id=session.pk, kind="case_recorded", payload=payload)
    return Case.objects.get(pk=event.pk)


def note(session: OptimizationSession, text: str) -> JournalEvent:
    return journal_append(session_id=session.pk, kind="session_note", payload={"text": text})


def events_of(session: OptimizationSession) -> QuerySet[JournalEvent]:
    return JournalEvent.objects.filter(session_id=session.pk)


def test_a_session_is_made_with_its_journal(team: Team, version: OperatorVersion) -> None:
    """However it is made (the service, a bare create as benchmarks and tests do, or many at
    once), a session has its journal row under its own id, with what memory reads of it."""
    made = session_create(team=team, user=None, operators=["softmax_rows"], memory_mode="off",
                          start=False)  # fmt: skip
    bare = OptimizationSession.objects.create(team=team, target="cuda", memory_mode="read_only")
    (bulk,) = OptimizationSession.objects.bulk_create([OptimizationSession(team=team)])
    journals = Journal.objects.filter(pk__in=[made.pk, bare.pk, bulk.pk]).order_by("pk")
    assert list(journals.values("id", "team_id", "target", "memory_mode", "last_seq",
                                "tokens_used")) == [
        {"id": made.pk, "team_id": team.pk, "target": "cpu-c", "memory_mode": "off",
         "last_seq": 0, "tokens_used": 0},
        {"id": bare.pk, "team_id": team.pk, "target": "cuda", "memory_mode": "read_only",
         "last_seq": 0, "tokens_used": 0},
        {"id": bulk.pk, "team_id": team.pk, "target": "", "memory_mode": "read_write",
         "last_seq": 0, "tokens_used": 0},
    ]  # fmt: skip
    note(bare, "first")
    assert (bare.last_seq, made.last_seq) == (1, 0)  # read from the journal, live


def test_model_tokens_are_summed_on_the_journal(session: OptimizationSession) -> None:
    usage = {"input_tokens": 120, "output_tokens": 30}
    for iteration in (1, 2):
        journal_append(session_id=session.pk, kind="model_called",
                       payload={"operator": "relu", "iteration": iteration, "model": "m",
                                "usage": usage})  # fmt: skip
    assert (session.tokens_used, session.last_seq) == (300, 2)


def test_sequence_numbers_are_gapless_per_session(team: Team, session: OptimizationSession) -> None:
    other = OptimizationSession.objects.create(team=team, target="cpu-c")
    for i in range(3):
        note(session, f"a{i}")
        note(other, f"b{i}")
    assert [e.seq for e in events_of(session).all()] == [1, 2, 3]
    assert [e.seq for e in events_of(other).all()] == [1, 2, 3]
    assert [e.payload["text"] for e in events_since(session.pk, 1)] == ["a1", "a2"]


def test_the_database_refuses_to_update_or_delete_journal_events(
    session: OptimizationSession,
) -> None:
    event = note(session, "what happened")
    with pytest.raises(DatabaseError, match="append-only: UPDATE"), transaction.atomic():
        JournalEvent.objects.filter(pk=event.pk).update(payload={"text": "rewritten"})
    with pytest.raises(DatabaseError, match="append-only: DELETE"), transaction.atomic():
        JournalEvent.objects.filter(pk=event.pk).delete()
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE memory_journalevent SET kind = 'x'")
    event.refresh_from_db()
    assert event.payload == {"text": "what happened"}


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        ("rewrite_history", {}, "event kind 'rewrite_history' is not one of"),
        ("session_note", {"text": "x", "extra": 1}, "unknown fields extra"),
        ("session_note", {}, "missing 1 required positional argument: 'text'"),
        ("session_note", {"text": "  "}, "a note needs text"),
    ],
)
def test_a_bad_event_is_refused_and_nothing_is_written(
    session: OptimizationSession, kind: str, payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(PayloadError, match=message):
        journal_append(session_id=session.pk, kind=kind, payload=payload)
    session.refresh_from_db()
    assert session.last_seq == 0 and not events_of(session).exists()


def test_a_bad_case_is_refused_and_nothing_is_written(
    session: OptimizationSession, version: OperatorVersion
) -> None:
    with pytest.raises(PayloadError, match="outcome 'faster' is not one of"):
        record(session, version, 1, outcome="faster")
    with pytest.raises(PayloadError, match="parent case 999 does not exist"):
        record(session, version, 1, parent_case_id=999)
    with pytest.raises(PayloadError, match="adopted items that were not retrieved: case:7"):
        record(session, version, 1, adopted=[{"key": "case:7", "why": "tiling"}])
    with pytest.raises(PayloadError, match="must be correct"):
        record(session, version, 1, correct=False)
    session.refresh_from_db()
    assert session.last_seq == 0 and not Case.objects.exists()


def test_an_iteration_cannot_record_two_cases(
    session: OptimizationSession, version: OperatorVersion
) -> None:
    record(session, version, 1)
    with pytest.raises(DatabaseError):
        record(session, version, 1)
    session.refresh_from_db()
    assert session.last_seq == 1  # the second append rolled back whole


CONCURRENT_WRITER = """
import os, sys, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kope_web.settings.test")
django.setup()
from apps.memory.journal import journal_append
session_id, count, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for i in range(count):
    journal_append(session_id=session_id, kind="session_note", payload={"text": f"{name}{i}"})
"""


def test_two_processes_appending_to_one_session_leave_no_gap(
    transactional_db: None, team: Team
) -> None:
    session = OptimizationSession.objects.create(team=team, target="cpu-c")
    env = process_env("single-machine")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WRITER, str(session.pk), "60", name],
            cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)},
        )
        for name in ("a", "b")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]

    seqs = list(events_of(session).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 121))
    texts = set(events_of(session).values_list("payload__text", flat=True))
    assert texts == {f"{w}{i}" for w in "ab" for i in range(60)}
    session.refresh_from_db()
    assert session.last_seq == 120
    assert os.environ.get("DJANGO_SETTINGS_MODULE")  # the writers used the same test database


def grow_forest(session: OptimizationSession, version: OperatorVersion) -> dict[str, Case]:
    """root -> a (improved) -> a1 (incorrect); root -> b (crashed); a -> a2 (improved, best)."""
    root = record(
        session, version, 0, latency_ms=40.0, speedup_vs_reference=0.5, outcome="no_change"
    )
    a = record(
        session, version, 1, parent_case_id=root.pk, latency_ms=20.0, speedup_vs_reference=1.0
    )
    b = record(session, version, 2, parent_case_id=root.pk, outcome="crashed", correct=False)
    a1 = record(session, version, 3, parent_case_id=a.pk, outcome="incorrect", correct=False)
    a2 = record(
        session, version, 4, parent_case_id=a.pk, latency_ms=10.0, speedup_vs_reference=2.0,
        tags=["tiling"], retrieved=["case:1"], adopted=[{"key": "case:1", "why": "tile"}],
    )  # fmt: skip
    return {"root": root, "a": a, "b": b, "a1": a1, "a2": a2}


def test_the_forest_rebuilt_from_the_journal_equals_the_live_tables(
    session: OptimizationSession, version: OperatorVersion
) -> None:
    grow_forest(session, version)
    note(session, "between cases")
    live = list(Case.objects.order_by("pk").values())

    assert forest_rebuild() == 5
    assert list(Case.objects.order_by("pk").values()) == live
    assert forest_rebuild(session_id=session.pk) == 5
    assert list(Case.objects.order_by("pk").values()) == live


def test_forest_queries(session: OptimizationSession, version: OperatorVersion) -> None:
    cases = grow_forest(session, version)
    operator = version.operator

    assert [c.pk for c in path_to(cases["a2"])] == [cases[k].pk for k in ("root", "a", "a2")]
    assert [c.pk for c in children_of(cases["a"])] == [cases["a1"].pk, cases["a2"].pk]
    branches = {b["branch"]: b["best"] for b in best_per_branch(operator, "cpu-c")}
    assert branches == {cases["a"].pk: cases["a2"].pk, cases["b"].pk: None}  # failure kept
    tree = subtree_json(cases["root"], depth=1)
    assert tree["child_count"] == 2 and [c["outcome"] for c in tree["children"]] == [
        "improved",
        "crashed",
    ]
    assert tree["children"][0]["children"] == [] and tree["children"][0]["child_count"] == 2
