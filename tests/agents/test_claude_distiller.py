"""UGC's distiller with the model, through the real SDK against the scripted local server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from apps.accounts.models import Team
from apps.agents.claude.client import ClientSettings, ModelClient
from apps.agents.claude.distiller import model_distiller
from apps.memory.models import MemoryVector
from apps.memory.values import MemoryMode, consolidate
from tests.support.fake_anthropic import FakeAnthropic, error, message, text, tool_use

MODEL = "claude-distiller-test"


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def distill_with(api: FakeAnthropic):  # type: ignore[no-untyped-def]
    client = ModelClient(ClientSettings(api_key="sk-ant-test-distiller", model=MODEL,
                                        base_url=api.base_url, max_retries=0))  # fmt: skip
    return model_distiller(client, MODEL)


def earned_experience(team: Team) -> MemoryVector:
    return MemoryVector.objects.create(
        key="case:7", kind="case", team=team, target="cpu-c", family="reduction",
        text="softmax_rows: flags(set=fast_math) improved 5.4x", value=0.3, adoptions=3,
        adopted_operators=["scaled_softmax", "logsumexp_rows", "layernorm"],
    )  # fmt: skip


def test_the_model_words_the_rule_from_the_evidence(team: Team, api: FakeAnthropic) -> None:
    earned_experience(team)
    api.script(message(text("Here it is."), tool_use("propose_rule", {
        "statement": "Compile row-wise exp/log kernels with -ffast-math",
        "applies_when": "float32 rows with expf or logf in the inner loop",
        "not_when": "the tolerance is tighter than 1e-4"}), stop_reason="tool_use"))  # fmt: skip

    (rule,) = consolidate(team, mode=MemoryMode.READ_WRITE, distill=distill_with(api))

    version = rule.versions.get()
    assert version.statement == "Compile row-wise exp/log kernels with -ffast-math"
    assert version.not_when == "the tolerance is tighter than 1e-4"
    assert version.evidence["distilled_by"].startswith(f"{MODEL} (usage")
    assert version.evidence["operators"] == ["scaled_softmax", "logsumexp_rows", "layernorm"]
    (request,) = api.requests
    assert "improved 5.4x" in request.body["messages"][0]["content"]
    assert request.body["tools"][0]["name"] == "propose_rule"


def test_without_the_model_the_summarizer_words_it_and_says_so(
    team: Team, api: FakeAnthropic
) -> None:
    earned_experience(team)
    api.script(error(401, "authentication_error", "invalid x-api-key"))

    (rule,) = consolidate(team, mode=MemoryMode.READ_WRITE, distill=distill_with(api))

    version = rule.versions.get()
    assert version.statement  # the deterministic wording
    assert "deterministic summarizer (the model was unavailable" in version.evidence["distilled_by"]
    assert "401" in version.evidence["distilled_by"]
