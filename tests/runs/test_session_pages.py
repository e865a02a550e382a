"""The session pages: launching from the form, and agent-written text shown inert."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.models import Evaluation
from apps.devices.services import kernel_source_store
from apps.memory.journal import journal_append
from apps.memory.models import Case, JournalEvent
from apps.operators.models import Operator
from apps.operators.services import suite_set
from apps.runs import views
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import stored_builtin
from tests.runs.test_estimate import TIMES

PLANTED = "<script>alert('planted')</script>"


def test_the_launch_form_starts_a_session_with_its_settings(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    stored_builtin("relu")
    client = client_for(Role.ENGINEER)

    response = client.post(f"/t/{team.slug}/sessions/new/", {
        "operators": ["relu"], "policy": "offline", "memory_mode": "read_only", "rounds": "4",
        "plateau": "2", "repeats": "20", "seed": "7", "label": "from the form"})  # fmt: skip

    session = OptimizationSession.objects.get(team=team)
    assert response.status_code == 302
    assert response["Location"] == f"/t/{team.slug}/sessions/{session.pk}/"
    assert (session.memory_mode, session.label, session.config["seed"]) == (
        "read_only", "from the form", 7)  # fmt: skip
    assert session.config["budgets"]["rounds"] == 4
    assert session.config["measurement"]["repeats"] == 20


def test_an_operator_slug_shared_and_the_team_s_own_is_one_choice_that_launches_the_team_s(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    stored_builtin("relu")
    own = stored_builtin("relu", team)
    client = client_for(Role.ENGINEER)

    form = client.get(f"/t/{team.slug}/sessions/new/").context["form"]
    client.post(f"/t/{team.slug}/sessions/new/", {
        "operators": "relu", "policy": "offline", "memory_mode": "off",
        "rounds": "4", "plateau": "2", "repeats": "20", "seed": "0"})  # fmt: skip

    assert [slug for slug, _ in form.fields["operators"].choices] == ["relu"]
    session = OptimizationSession.objects.get(team=team)
    assert [entry["version_id"] for entry in session.config["operators"]] == [own.pk]


def test_a_suite_slug_shared_and_the_team_s_own_is_one_choice_that_launches_the_team_s(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    relu, gelu = (Operator.objects.get(pk=stored_builtin(s).operator_id) for s in ("relu", "gelu"))
    suite_set(team=None, slug="kernelbench-level1", name="A shared", operators=[relu])
    suite_set(team=team, slug="kernelbench-level1", name="B ours", operators=[gelu])
    client = client_for(Role.ENGINEER)

    form = client.get(f"/t/{team.slug}/sessions/new/").context["form"]
    client.post(f"/t/{team.slug}/sessions/new/", {
        "suite": "kernelbench-level1", "policy": "offline", "memory_mode": "off",
        "rounds": "4", "plateau": "2", "repeats": "20", "seed": "0"})  # fmt: skip

    assert [slug for slug, _ in form.fields["suite"].choices] == ["", "kernelbench-level1"]
    session = OptimizationSession.objects.get(team=team)
    assert session.config["suite"]["name"] == "B ours"
    assert [entry["slug"] for entry in session.config["operators"]] == ["gelu"]


def test_the_launch_form_says_what_is_missing(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    response = client_for(Role.ENGINEER).post(f"/t/{team.slug}/sessions/new/", {
        "policy": "offline", "memory_mode": "off", "rounds": "4", "plateau": "2",
        "repeats": "20", "seed": "0"})  # fmt: skip

    assert response.status_code == 400
    assert "Pick operators or a suite" in response.content.decode()
    assert not OptimizationSession.objects.exists()


def test_agent_written_strategy_and_code_are_escaped(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    version = stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    source = kernel_source_store(f"/* {PLANTED} */\nint kope_kernel;\n")
    case = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 0, "version_id": version.pk, "target": "cpu-c", "strategy": PLANTED,
        "outcome": "no_change", "correct": True, "source_sha256": source.sha256,
        "latency_ms": 1.0})  # fmt: skip
    journal_append(session_id=session.pk, kind="incumbent_replaced", payload={
        "operator": "relu", "iteration": 0, "case_id": case.pk, "previous_case_id": None,
        "latency_ms": 1.0, "previous_latency_ms": None})  # fmt: skip
    journal_append(session_id=session.pk, kind="candidate_proposed", payload={
        "operator": "relu", "iteration": 1, "strategy": PLANTED, "source_sha256": source.sha256,
        "parent_case_id": case.pk})  # fmt: skip

    page = client_for(Role.VIEWER).get(f"/t/{team.slug}/sessions/{session.pk}/").content.decode()

    assert PLANTED not in page
    assert "alert(&#x27;planted&#x27;)" in page or "alert(&#39;planted&#39;)" in page
    assert page.count("&lt;script&gt;") >= 3  # the strategy twice (table, log), the code once


def test_the_launch_form_estimates_the_size_of_the_run_from_measured_evaluations(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    relu = stored_builtin("relu")
    client = client_for(Role.ENGINEER)
    url = f"/t/{team.slug}/sessions/new/?part=estimate&operators=relu&operators=cumsum"

    offline = client.get(f"{url}&rounds=4&policy=offline").content.decode()
    assert "1 operator," in offline and "at most 4 evaluations" in offline  # cumsum: not stored
    assert "unknown until this team" in offline and "none (the offline policy" in offline
    claude = client.get(f"{url}&rounds=4&policy=claude").content.decode()
    assert "up to 48000 " in claude  # 4 iterations x a 12,000-token context

    source = kernel_source_store("int kope_kernel;")
    started = timezone.now()
    for seconds in (10, 20, 60):
        Evaluation.objects.create(
            team=team, version=relu, target="cpu-c", source=source, options={},
            options_key=str(seconds), status=Evaluation.Status.DONE, started_at=started,
            finished_at=started + timedelta(seconds=seconds))  # fmt: skip
    measured = client.get(f"{url}&rounds=30&policy=offline").content.decode()
    assert (
        f"about 10 min: 30 rounds {TIMES} 20 s per round, from this team's median evaluation "
        "time over its last 3 evaluations"
    ) in measured  # no finished session yet
    assert "ahead in the queue" not in measured
    form = client.get(f"/t/{team.slug}/sessions/new/").content.decode()
    assert "Pick operators or a suite to see the size of the run" in form


def test_the_session_page_charts_every_attempt_and_shows_what_was_adopted_and_why(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    version = stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    source = kernel_source_store("int kope_kernel;\n")
    for iteration, outcome, latency in [(0, "no_change", 4.0), (1, "incorrect", None),
                                        (2, "regressed", 3.0), (3, "improved", 1.0)]:  # fmt: skip
        journal_append(session_id=session.pk, kind="case_recorded", payload={
            "iteration": iteration, "version_id": version.pk, "target": "cpu-c",
            "strategy": f"try {iteration}", "outcome": outcome, "correct": latency is not None,
            "source_sha256": source.sha256, "latency_ms": latency,
            "speedup_vs_parent": 0.9 if iteration == 2 else None})  # fmt: skip
        if outcome in ("no_change", "improved"):  # the first correct one, then the faster
            journal_append(session_id=session.pk, kind="incumbent_replaced", payload={
                "operator": "relu", "iteration": iteration, "latency_ms": latency,
                "case_id": Case.objects.get(session_id=session.pk, iteration=iteration).pk,
                "previous_case_id": None, "previous_latency_ms": None})  # fmt: skip
    journal_append(session_id=session.pk, kind="context_assembled", payload={
        "operator": "relu", "iteration": 3, "tokens": 900, "budget": 12000,
        "tokens_per_tier": {"hot": 300, "warm": 500, "cold": 100}, "cut": [], "hot_rules": [],
        "admitted": ["case:7", "case:9"], "shortened": [],
        "retrieved": [{"key": "case:7", "kind": "case", "operator": "gelu", "similarity": 0.8,
                       "value": 0.4},
                      {"key": "case:9", "kind": "case", "operator": "sigmoid", "similarity": 0.5,
                       "value": 0.1}]})  # fmt: skip
    journal_append(session_id=session.pk, kind="candidate_proposed", payload={
        "operator": "relu", "iteration": 3, "strategy": "simd", "source_sha256": source.sha256,
        "adopted": [{"key": "case:7", "why": "simd paid 3x on gelu"}], "retrieved": [],
        "parent_case_id": None})  # fmt: skip
    client = client_for(Role.VIEWER)

    page = client.get(f"/t/{team.slug}/sessions/{session.pk}/").content.decode()
    start = page.index('<script id="latency-data" type="application/json">')
    chart = json.loads(page[page.index(">", start) + 1 : page.index("</script>", start)])
    attempts = chart["attempts"]["relu"]
    assert [(a["iteration"], a["outcome"], a["latency_ms"], a["vs_parent"], a["incumbent"])
            for a in attempts] == [(0, "no_change", 4.0, None, True),
                                   (1, "incorrect", None, None, False),
                                   (2, "regressed", 3.0, 0.9, False),
                                   (3, "improved", 1.0, None, True)]  # fmt: skip
    assert chart["versions"] == {str(version.pk): "relu"}
    # without JavaScript the table says the same: a lower latency that lost beside its parent
    assert "4.000 ms (new incumbent)</td><td>-</td>" in page
    assert "3.000 ms</td><td>0.90x</td>" in page
    case_ids = [a["case"] for a in attempts]
    for case_id in case_ids:  # the event log links each case the journal recorded
        assert f'<a href="/t/{team.slug}/cases/{case_id}/">case {case_id}</a></li>' in page
    context = client.get(f"/t/{team.slug}/sessions/{session.pk}/?part=context").content.decode()
    assert "relu #3: 900 of 12000 tokens" in context
    assert "<strong>yes</strong>: simd paid 3x on gelu" in context
    assert context.count("<td>no</td>") == 1  # case:9 was retrieved, not adopted


def test_the_session_page_is_drawn_from_one_moment_of_a_running_session(
    transactional_db: None,
    team: Team,
    client_for: Callable[[Role], Client],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The page reads the session, its log and its chart one after the other. A case recorded
    in between (here: by another connection, between the log and the chart) must not be in the
    chart while its event is past the page's last seq: the socket, asking from that seq, would
    send it again, and the chart would show it twice."""
    version = stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    source = kernel_source_store("int kope_kernel;\n")

    def record(iteration: int) -> None:
        journal_append(session_id=session.pk, kind="case_recorded", payload={
            "iteration": iteration, "version_id": version.pk, "target": "cpu-c",
            "strategy": f"try {iteration}", "outcome": "improved", "correct": True,
            "source_sha256": source.sha256, "latency_ms": 4.0 - iteration,
            "speedup_vs_parent": None})  # fmt: skip

    def record_elsewhere(iteration: int) -> None:
        try:
            record(iteration)
        finally:
            connection.close()  # this thread's own connection

    record(0)
    drawn = views.latency_chart

    def chart_after_a_case_is_recorded(*args: Any) -> dict[str, Any]:
        worker = threading.Thread(target=record_elsewhere, args=(1,))
        worker.start()
        worker.join()
        return drawn(*args)

    monkeypatch.setattr(views, "latency_chart", chart_after_a_case_is_recorded)

    response = client_for(Role.VIEWER).get(f"/t/{team.slug}/sessions/{session.pk}/")

    assert Case.objects.filter(session_id=session.pk).count() == 2  # it was recorded
    assert [a["iteration"] for a in response.context["chart"]["attempts"]["relu"]] == [0]
    first = JournalEvent.objects.get(session_id=session.pk, kind="case_recorded",
                                     payload__iteration=0)  # fmt: skip
    assert response.context["last_seq"] == first.seq


def test_retrieved_items_of_a_context_no_proposal_followed_are_not_left_deciding(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    """The policy proposed nothing (every strategy tried) and the operator finished: its items
    said "deciding…" for ever."""
    stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    journal_append(session_id=session.pk, kind="context_assembled", payload={
        "operator": "relu", "iteration": 4, "tokens": 900, "budget": 12000,
        "tokens_per_tier": {"hot": 900}, "cut": [], "hot_rules": [], "admitted": ["case:7"],
        "shortened": [], "retrieved": [{"key": "case:7", "kind": "case", "operator": "gelu",
                                        "similarity": 0.8, "value": 0.4}]})  # fmt: skip
    client = client_for(Role.VIEWER)
    context_part = f"/t/{team.slug}/sessions/{session.pk}/?part=context"
    assert "deciding…" in client.get(context_part).content.decode()

    journal_append(session_id=session.pk, kind="operator_finished", payload={
        "operator": "relu", "reason": "every strategy that applies has been tried",
        "rounds_used": 4, "best_case_id": None, "start_latency_ms": None,
        "best_latency_ms": None, "speedup_vs_start": None,
        "speedup_vs_reference": None})  # fmt: skip

    context = client.get(context_part).content.decode()
    assert "deciding…" not in context and "no proposal followed" in context


def test_a_finished_session_whose_operators_all_failed_says_so_beside_its_status(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    """Its only operator failed, and the page showed a green "finished" and nothing else."""
    stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    client = client_for(Role.VIEWER)
    OptimizationSession.objects.filter(pk=session.pk).update(status="finished")

    page = client.get(f"/t/{team.slug}/sessions/{session.pk}/").content.decode()

    assert 'id="none-correct">with no correct kernel: no operator ended with one' in page
    OptimizationSession.objects.filter(pk=session.pk).update(status="running")
    assert (
        "none-correct" not in client.get(f"/t/{team.slug}/sessions/{session.pk}/").content.decode()
    )
