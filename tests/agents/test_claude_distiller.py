"""UGC's distiller with the model, through the real SDK against the scripted local server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from apps.agents.claude.client import ClientSettings, ModelClient
from apps.agents.claude.distiller import model_distiller
from apps.memory.rules import Wording
from apps.memory.values import Distiller, Experience
from tests.support.fake_anthropic import FakeAnthropic, error, message, text, tool_use

MODEL = "claude-distiller-test"


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def distill_with(api: FakeAnthropic) -> Distiller:
    client = ModelClient(ClientSettings(api_key="sk-ant-test-distiller", model=MODEL,
                                        base_url=api.base_url, max_retries=0))  # fmt: skip
    return model_distiller(client, MODEL)


EARNED = Experience("case:7", "softmax_rows: flags(set=fast_math) improved 5.4x",
                    summary=Wording(
                        "Compile with -ffast-math (changes floating-point results). Expected "
                        "speedup vs parent: median 4.10x (2.20x-5.40x) over 3 adoptions.",
                        "reduction operators (large float32) on cpu-c; improved layernorm, "
                        "logsumexp_rows, scaled_softmax",
                        "it broke correctness on sigmoid: incorrect (case 31)"))  # fmt: skip
EVIDENCE: dict[str, Any] = {
    "source": "case:7", "sources": ["case:7"], "value": 0.3, "adoptions": 3,
    "operators": ["scaled_softmax", "logsumexp_rows", "layernorm"],
    "adoption_cases": [11, 12, 13], "speedups": [2.2, 4.1, 5.4],
    "failures": [{"case": 31, "operator": "sigmoid", "outcome": "incorrect"}],
}  # fmt: skip


def test_the_model_words_the_rule_from_the_evidence(api: FakeAnthropic) -> None:
    api.script(message(text("Here it is."), tool_use("propose_rule", {
        "statement": "Compile row-wise exp/log kernels with -ffast-math",
        "applies_when": "float32 rows with expf or logf in the inner loop",
        "not_when": "the tolerance is tighter than 1e-4"}), stop_reason="tool_use"))  # fmt: skip

    wording, how = distill_with(api)(EARNED, EVIDENCE)

    assert wording.statement == "Compile row-wise exp/log kernels with -ffast-math"
    assert wording.not_when == "the tolerance is tighter than 1e-4"
    assert how.startswith(f"{MODEL} (usage")
    (request,) = api.requests
    assert "improved 5.4x" in request.body["messages"][0]["content"]
    assert '"layernorm"' in request.body["messages"][0]["content"]
    assert request.body["tools"][0]["name"] == "propose_rule"


def test_the_model_is_asked_for_what_to_do_its_effect_when_and_when_not(
    api: FakeAnthropic,
) -> None:
    api.script(message(text("No rule from me."), stop_reason="end_turn"))

    wording, how = distill_with(api)(EARNED, EVIDENCE)

    assert (
        wording == EARNED.summary and how == f"deterministic summarizer ({MODEL} proposed no rule)"
    )
    (request,) = api.requests
    schema = request.body["tools"][0]["input_schema"]
    assert schema["required"] == ["statement", "applies_when", "not_when"]
    assert "median and range" in schema["properties"]["statement"]["description"]
    assert "operator names" in schema["properties"]["not_when"]["description"]
    system = str(request.body["system"])
    assert all(part in system for part in ("in words", "shape class, dtype", "profile", "failures"))
    prompt = request.body["messages"][0]["content"]
    assert EARNED.summary.statement in prompt and EARNED.summary.not_when in prompt
    assert '"speedups": [2.2, 4.1, 5.4]' in prompt and '"operator": "sigmoid"' in prompt


def test_without_the_model_the_summarizer_words_it_and_says_so(api: FakeAnthropic) -> None:
    api.script(error(401, "authentication_error", "invalid x-api-key"))

    wording, how = distill_with(api)(EARNED, EVIDENCE)

    assert wording == EARNED.summary
    assert "deterministic summarizer (the model was unavailable" in how
    assert "401" in how
