"""The session pages: launching from the form, and agent-written text shown inert."""

from __future__ import annotations

from collections.abc import Callable

from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.services import kernel_source_store
from apps.memory.journal import journal_append
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import stored_builtin

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


def test_the_launch_form_says_what_is_missing(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    response = client_for(Role.ENGINEER).post(f"/t/{team.slug}/sessions/new/", {
        "policy": "offline", "memory_mode": "off", "rounds": "4", "plateau": "2",
        "repeats": "20", "seed": "0"})  # fmt: skip

    assert response.status_code == 200
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
