"""The Claude policy in a real session, through the real anthropic SDK over real HTTP, against a
local server that speaks the Messages API with scripted replies (tests/support)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from apps.memory.models import Case, JournalEvent
from apps.runs.config import Budgets, Measurement
from apps.runs.evaluators import evaluate_here
from apps.runs.loop import advance
from apps.runs.models import OptimizationSession
from apps.runs.policies import policy_for
from apps.runs.services import session_create, session_resume
from tests.factories import TeamFactory, stored_builtin
from tests.support.fake_anthropic import FakeAnthropic, error, message, text, tool_use

API_KEY = "sk-ant-test-SECRET-5f2e9c1d7b"
MODEL = "claude-test-model"

IPJ_GEMM = """#include "kope_kernel.h"

int kope_kernel(const kope_tensor *inputs, int32_t n_inputs,
                kope_tensor *outputs, int32_t n_outputs,
                const double *attrs, int32_t n_attrs) {
    const float *A = (const float *)inputs[0].data;
    const float *B = (const float *)inputs[1].data;
    float *C = (float *)outputs[0].data;
    int64_t m = inputs[0].shape[0], k = inputs[0].shape[1], n = inputs[1].shape[1];
    for (int64_t i = 0; i < m; ++i) {
        float *c = C + i * n;
        for (int64_t j = 0; j < n; ++j) c[j] = 0.0f;
        for (int64_t p = 0; p < k; ++p) {
            const float a = A[i * k + p];
            const float *b = B + p * n;
            for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
        }
    }
    return 0;
}
"""

FIRST_USAGE = {"input_tokens": 1200, "output_tokens": 40, "cache_creation_input_tokens": 300,
               "cache_read_input_tokens": 0}  # fmt: skip
SECOND_USAGE = {"input_tokens": 1500, "output_tokens": 700, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 900}  # fmt: skip


@pytest.fixture
def claude_api(settings: Any) -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as api:
        settings.ANTHROPIC_API_KEY = API_KEY
        settings.KOPE_CLAUDE_BASE_URL = api.base_url
        settings.KOPE_CLAUDE_MAX_RETRIES = 1
        yield api


def claude_session(rounds: int) -> OptimizationSession:
    stored_builtin("gemm")
    return session_create(
        team=TeamFactory(),
        user=None,
        operators=["gemm"],
        policy="claude",
        model=MODEL,
        budgets=Budgets(rounds=rounds),
        measurement=Measurement(seeds=1, warmup=1, repeats=5),
        start=False,
    )


def step(session: OptimizationSession) -> bool:
    return advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)


def events(session: OptimizationSession, kind: str) -> list[JournalEvent]:
    return list(JournalEvent.objects.filter(session_id=session.pk, kind=kind).order_by("seq"))


def test_a_scripted_claude_iteration_runs_its_tools_records_adoption_and_counts_tokens(
    transactional_db: None, eager_tasks: None, claude_api: FakeAnthropic
) -> None:
    session = claude_session(rounds=2)
    assert step(session)  # iteration 0: the starting kernel, no model call
    start_key = f"case:{Case.objects.get(session_id=session.pk, iteration=0).pk}"
    claude_api.script(
        message(text("Let me look for lessons first."),
                tool_use("search_memory", {"query": "gemm loop order naive"}),
                stop_reason="tool_use", usage=FIRST_USAGE),
        message(tool_use("declare_adoption", {"items": [
                    {"key": start_key, "why": "its i-j-p order strides through B by columns"}]}),
                tool_use("write_candidate", {"source": IPJ_GEMM, "strategy": "interchange i-p-j",
                                             "threads": 1}),
                tool_use("evaluate", {}), stop_reason="tool_use", usage=SECOND_USAGE),
    )  # fmt: skip

    assert step(session)  # iteration 1: two model turns, then the evaluation
    while step(session):
        pass

    session.refresh_from_db()
    assert session.status == "finished", session.status_reason
    case = Case.objects.get(session_id=session.pk, iteration=1)
    assert case.strategy == "interchange i-p-j" and case.correct and case.outcome == "improved"
    assert case.adopted == [{"key": start_key,
                             "why": "its i-j-p order strides through B by columns"}]  # fmt: skip
    assert start_key in case.retrieved
    tools = [e.payload["tool"] for e in events(session, "tool_called")]
    assert tools == ["search_memory", "declare_adoption", "write_candidate", "evaluate"]
    calls = events(session, "model_called")
    assert [c.payload["usage"] for c in calls] == [FIRST_USAGE, SECOND_USAGE]
    assert all(c.payload["model"] == MODEL for c in calls)
    assert session.tokens_used == sum(FIRST_USAGE.values()) + sum(SECOND_USAGE.values())
    # what the server received: the context as the user turn, the tools, the model; the key
    # only in the authorization header, never in a prompt or the journal
    first, second = claude_api.requests
    assert first.body["model"] == MODEL and "kope_kernel" in json.dumps(first.body["system"])
    assert "# Current task" in first.body["messages"][0]["content"]
    assert {t["name"] for t in first.body["tools"]} >= {"write_candidate", "evaluate", "profile",
                                                        "debug_build", "search_memory",
                                                        "declare_adoption"}  # fmt: skip
    assert second.body["messages"][-1]["content"][0]["type"] == "tool_result"
    assert API_KEY in first.headers.get("authorization", "") + first.headers.get("x-api-key", "")
    assert all(API_KEY not in json.dumps(r.body) for r in claude_api.requests)
    journal = json.dumps(list(JournalEvent.objects.filter(session_id=session.pk).values("payload")))
    assert API_KEY not in journal


def test_a_kernel_already_run_is_sent_back_to_the_model_without_spending_a_round(
    transactional_db: None, eager_tasks: None, claude_api: FakeAnthropic
) -> None:
    session = claude_session(rounds=2)
    assert step(session)  # iteration 0: the starting kernel
    starting = Case.objects.get(session_id=session.pk, iteration=0).source.text
    claude_api.script(
        message(tool_use("write_candidate", {"source": starting, "strategy": "as it was"}),
                tool_use("evaluate", {}), stop_reason="tool_use"),
        message(tool_use("write_candidate", {"source": IPJ_GEMM, "strategy": "interchange i-p-j"}),
                tool_use("evaluate", {}), stop_reason="tool_use"),
    )  # fmt: skip

    assert step(session)

    refused = claude_api.requests[1].body["messages"][-1]["content"][1]
    assert refused["is_error"] and "already ran for this operator" in refused["content"]
    assert Case.objects.get(session_id=session.pk, iteration=1).strategy == "interchange i-p-j"


def test_a_kernel_already_run_written_without_evaluate_is_sent_back_too(
    transactional_db: None, eager_tasks: None, claude_api: FakeAnthropic
) -> None:
    """A model that writes a kernel the operator already ran and stops talking is told so, as
    `evaluate` would have told it, rather than having that kernel measured again."""
    session = claude_session(rounds=2)
    assert step(session)  # iteration 0: the starting kernel
    starting = Case.objects.get(session_id=session.pk, iteration=0).source.text
    claude_api.script(
        message(tool_use("write_candidate", {"source": starting, "strategy": "as it was"}),
                stop_reason="tool_use"),
        message(text("Done."), stop_reason="end_turn"),
        message(tool_use("write_candidate", {"source": IPJ_GEMM, "strategy": "interchange i-p-j"}),
                tool_use("evaluate", {}), stop_reason="tool_use"),
    )  # fmt: skip

    assert step(session)

    told = claude_api.requests[2].body["messages"][-1]["content"]
    assert "already ran for this operator" in json.dumps(told)
    assert Case.objects.get(session_id=session.pk, iteration=1).strategy == "interchange i-p-j"


def test_an_api_that_keeps_failing_pauses_the_session_with_the_reason_and_loses_nothing(
    transactional_db: None, eager_tasks: None, claude_api: FakeAnthropic
) -> None:
    session = claude_session(rounds=2)
    assert step(session)
    claude_api.script(error(529, "overloaded_error", "Overloaded"),
                      error(529, "overloaded_error", "Overloaded"))  # fmt: skip

    assert not step(session)

    session.refresh_from_db()
    assert session.status == "paused"
    assert "overloaded" in session.status_reason and "2 attempts" in session.status_reason
    assert events(session, "session_paused")[-1].payload["reason"] == session.status_reason
    assert Case.objects.filter(session_id=session.pk).count() == 1  # iteration 0 is kept

    claude_api.script(message(tool_use("write_candidate", {"source": IPJ_GEMM,
                                                           "strategy": "interchange i-p-j"}),
                              tool_use("evaluate", {}), stop_reason="tool_use"))  # fmt: skip
    session_resume(session=session, user=None)
    while step(session):
        pass

    assert Case.objects.get(session_id=session.pk, iteration=1).strategy == "interchange i-p-j"
    assert OptimizationSession.objects.get(pk=session.pk).status == "finished"
