"""Oversized and malformed input to sessions: a 1 MB strategy name from a policy, a 50 MB
kernel to the API, kernels with NUL characters or lone surrogates. Each is bounded or refused
with a 4xx and a reason; nothing half-made is left behind."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.agents.claude.policy import ToolInputError, Turns, search_tool, write_tool
from apps.agents.offline.policy import OfflineSearchPolicy
from apps.agents.policy import (
    MAX_STRATEGY_CHARS,
    Candidate,
    Proposal,
    Situation,
    Tools,
    bounded_strategy,
)
from apps.memory.models import Case, JournalEvent
from apps.memory.values import Distiller
from apps.operators.models import OperatorVersion
from apps.operators.spec import CaseSpec
from apps.runs.config import Budgets, Measurement
from apps.runs.evaluators import evaluate_here
from apps.runs.loop import advance
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import small_builtin

NAIVE_VECTOR_ADD = (
    Path(__file__).resolve().parents[2] / "apps/operators/builtin/vector_add/naive.c"
).read_text()
ONE_MEGABYTE_STRATEGY = "unroll(" + "factor=4, " * 100_000 + ")\x00"


@given(st.text(max_size=2000))
@settings(max_examples=200, deadline=None, database=None)
def test_any_strategy_name_is_kept_as_one_short_line(strategy: str) -> None:
    kept = bounded_strategy(strategy)
    assert 0 < len(kept) <= MAX_STRATEGY_CHARS
    assert "\x00" not in kept and "\n" not in kept and kept == kept.strip()


def test_a_one_megabyte_strategy_name_is_cut_to_the_limit() -> None:
    kept = bounded_strategy(ONE_MEGABYTE_STRATEGY)
    assert len(kept) == MAX_STRATEGY_CHARS
    assert kept.startswith("unroll(factor=4, factor=4,") and kept.endswith("…")


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"source": NAIVE_VECTOR_ADD, "strategy": ONE_MEGABYTE_STRATEGY},
         "the strategy name is 1000009 characters; the limit is 200: name it briefly"),
        ({"source": NAIVE_VECTOR_ADD + "\x00", "strategy": "unroll"},
         "the source holds a NUL character"),
        ({"source": NAIVE_VECTOR_ADD, "strategy": "threads", "threads": 100_000},
         "threads must be a whole number from 1 to 1024"),
        ({"source": NAIVE_VECTOR_ADD, "strategy": "threads", "threads": True},
         "threads must be a whole number from 1 to 1024"),
    ],
)  # fmt: skip
def test_the_claude_tool_tells_the_model_its_candidate_is_refused(
    arguments: dict[str, Any], reason: str
) -> None:
    state = Turns()
    with pytest.raises(ToolInputError, match=f"^{reason}$"):
        write_tool(arguments, state, None, None)  # type: ignore[arg-type]  # neither is used
    assert state.candidate is None


@pytest.mark.parametrize("limit", [float("inf"), 10**400, 1e300, "many", 0, 21, True, 2.5])
def test_the_claude_search_tool_refuses_a_limit_outside_its_schema(limit: Any) -> None:
    with pytest.raises(ToolInputError, match=r"^limit must be a whole number from 1 to 20$"):
        search_tool({"query": "tiling", "limit": limit}, Turns(), None, None)  # type: ignore[arg-type]


class LongWindedPolicy:
    """A policy whose strategy names are a megabyte long and hold a NUL character."""

    name = "long-winded"

    def propose(self, situation: Situation, tools: Tools) -> Proposal:
        source = NAIVE_VECTOR_ADD.replace("out[i] = a[i] + b[i]", "out[i] = b[i] + a[i]")
        return Proposal(Candidate(source, ONE_MEGABYTE_STRATEGY), rationale="commute")

    def distiller(self) -> Distiller:
        return OfflineSearchPolicy().distiller()


@pytest.fixture
def vector_add(db: None) -> OperatorVersion:
    """vector_add with two small cases (`vector_add_small`): evaluations take a moment."""
    cases = [CaseSpec("seven", {"n": 7}), CaseSpec("timing", {"n": 4096}, timing=True)]
    return small_builtin("vector_add", cases)


def test_a_policy_s_one_megabyte_strategy_name_is_recorded_cut_and_the_session_goes_on(
    team: Team, vector_add: OperatorVersion
) -> None:
    session = session_create(team=team, user=None, operators=["vector_add_small"],
                             memory_mode="off", budgets=Budgets(rounds=2),
                             measurement=Measurement(seeds=1, warmup=1, repeats=3),
                             start=False)  # fmt: skip
    for _ in range(20):
        if not advance(session.pk, evaluate=evaluate_here,
                       policy_for=lambda *_: LongWindedPolicy()):  # fmt: skip
            break
    session.refresh_from_db()

    assert session.status == "finished", session.status_reason
    case = Case.objects.get(session_id=session.pk, iteration=1)
    assert case.strategy == bounded_strategy(ONE_MEGABYTE_STRATEGY) and case.correct
    proposed = JournalEvent.objects.get(session_id=session.pk, kind="candidate_proposed",
                                        payload__iteration=1)  # fmt: skip
    assert proposed.payload["strategy"] == case.strategy
    journal = JournalEvent.objects.filter(session_id=session.pk)
    assert max(len(json.dumps(e.payload)) for e in journal) < 100_000


@pytest.fixture
def engineer(client_for: Callable[[Role | str], Client], vector_add: OperatorVersion) -> Client:
    return client_for(Role.ENGINEER)


def launch_body(kernel: str) -> str:
    body = {"operators": ["vector_add_small"], "starting_kernels": {"vector_add_small": kernel}}
    return json.dumps(body)


def test_a_50_mb_kernel_is_refused_with_413_before_it_is_parsed(
    team: Team, engineer: Client
) -> None:
    url, body = f"/api/teams/{team.slug}/sessions", launch_body("x" * 50_000_000)
    response = engineer.post(url, body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert not OptimizationSession.objects.exists()


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        ("x" * 200_001, "starting kernels over 200000 characters: vector_add_small"),
        (NAIVE_VECTOR_ADD + "\x00", "body.starting_kernels.vector_add_small holds a NUL"),
        (NAIVE_VECTOR_ADD + "\ud800", "the kernel is not valid Unicode text (character "),
    ],
)
def test_a_starting_kernel_that_cannot_be_stored_is_refused_with_400(
    team: Team, engineer: Client, kernel: str, message: str
) -> None:
    response = engineer.post(f"/api/teams/{team.slug}/sessions", launch_body(kernel),
                             content_type="application/json")  # fmt: skip
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(message)
    assert not OptimizationSession.objects.exists()
