"""UGC's distiller with the model: a rule's wording from an experience and its evidence.

The model is asked for one `propose_rule` tool call (statement, applies when, not when). When
it does not give one, or the API is unavailable, the deterministic summarizer words the rule
instead, and the evidence says so: a candidate is never lost to the model.
"""

from __future__ import annotations

import json
from typing import Any

from apps.agents.claude.client import ModelClient, ModelUnavailable
from apps.core.errors import DomainError
from apps.memory.rules import Wording
from apps.memory.values import Distiller, Experience

SYSTEM = """You distill standing guidance for a kernel-optimization agent from one experience
that worked across several operators. Call propose_rule once: a short imperative statement of
what to do, the conditions under which it applies, and when it does not. Be concrete (loop
shapes, data types, sizes); do not invent evidence beyond what you are given."""

PROPOSE_RULE = {
    "name": "propose_rule",
    "description": "The distilled rule.",
    "input_schema": {
        "type": "object",
        "properties": {
            "statement": {"type": "string", "maxLength": 400},
            "applies_when": {"type": "string", "maxLength": 400},
            "not_when": {"type": "string", "maxLength": 400},
        },
        "required": ["statement", "applies_when"],
    },
}


def model_distiller(client: ModelClient, model: str) -> Distiller:
    def distill(item: Experience, evidence: dict[str, Any]) -> tuple[Wording, str]:
        prompt = (f"Experience {item.key}:\n{item.text}\n\nEvidence (JSON):\n"
                  f"{json.dumps(evidence, default=str)[:4000]}")  # fmt: skip
        try:
            turn = client.turn(system=SYSTEM, messages=[{"role": "user", "content": prompt}],
                               tools=[PROPOSE_RULE])  # fmt: skip
        except ModelUnavailable as error:
            return item.summary, f"deterministic summarizer (the model was unavailable: {error})"
        wording = wording_from(turn.content)
        usage = turn.usage.as_json()
        if wording is None:
            return item.summary, f"deterministic summarizer ({model} proposed no rule)"
        return wording, f"{model} (usage {usage})"

    return distill


def wording_from(content: list[dict[str, Any]]) -> Wording | None:
    for block in content:
        if block.get("type") == "tool_use" and block.get("name") == "propose_rule":
            arguments = block.get("input") or {}
            wording = Wording(str(arguments.get("statement", "")).strip(),
                              str(arguments.get("applies_when", "")).strip(),
                              str(arguments.get("not_when", "")).strip())  # fmt: skip
            try:
                wording.check_edit()  # what a reviewer could have written: else summarize
            except DomainError:
                return None
            return wording
    return None
