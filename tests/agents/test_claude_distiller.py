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
                    summary=Wording("flags(set=fast_math) (speedup vs parent 5.40x)",
                                    "reduction operators on cpu-c"))  # fmt: skip
EVIDENCE: dict[str, Any] = {
    "source": "case:7", "value": 0.3, "adoptions": 3,
    "operators": ["scaled_softmax", "logsumexp_rows", "layernorm"],
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


def test_without_the_model_the_summarizer_words_it_and_says_so(api: FakeAnthropic) -> None:
    api.script(error(401, "authentication_error", "invalid x-api-key"))

    wording, how = distill_with(api)(EARNED, EVIDENCE)

    assert wording == EARNED.summary
    assert "deterministic summarizer (the model was unavailable" in how
    assert "401" in how
