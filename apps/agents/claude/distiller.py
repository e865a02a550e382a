"""UGC's distiller with the model: a rule's wording from an experience and its evidence.

The model is asked for one `propose_rule` tool call with the parts the deterministic summarizer
writes (apps/memory/candidates.py): a statement saying what to do in words and the expected
effect (median and range of the speedup vs parent over the adoptions that improved), when it
applies (family, shape class, dtype, target, what the profile showed) and when not (the
failures recorded for the same strategy, by operator). It is given the summarizer's wording
and the evidence, and told to cite only what they hold. When
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
whose strategy improved kernels on several operators. Call propose_rule once, written as a
kernel engineer would write it for a reviewer:
- statement: what to do, in words (e.g. "Parallelize the outermost loop with OpenMP (static
  schedule)", not a strategy label), then the expected effect from the evidence's speedups: the
  median and range of the speedup vs parent over the adoptions that improved.
- applies_when: the operator family, shape class, dtype and target, and what the profile
  showed where the evidence has one.
- not_when: the failures recorded for the same strategy (broke correctness, slowed down), with
  the operator names; say so when none is recorded.
Cite only numbers, operators and cases in the evidence; a draft by a deterministic summarizer is
given as a starting point."""

PROPOSE_RULE = {
    "name": "propose_rule",
    "description": "The distilled rule.",
    "input_schema": {
        "type": "object",
        "properties": {
            "statement": {
                "type": "string",
                "maxLength": 400,
                "description": "What to do, in words, and the expected speedup vs parent: "
                "median and range over the adoptions that improved.",
            },
            "applies_when": {
                "type": "string",
                "maxLength": 400,
                "description": "Operator family, shape class, dtype, target; what the "
                "profile showed, where known.",
            },
            "not_when": {
                "type": "string",
                "maxLength": 400,
                "description": "Recorded failures of the same strategy (broke correctness, "
                "slowed down), with operator names.",
            },
        },
        "required": ["statement", "applies_when", "not_when"],
    },
}


def model_distiller(client: ModelClient, model: str) -> Distiller:
    def distill(item: Experience, evidence: dict[str, Any]) -> tuple[Wording, str]:
        prompt = prompt_for(item, evidence)
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


def prompt_for(item: Experience, evidence: dict[str, Any]) -> str:
    draft = item.summary
    return (f"Experience {item.key}:\n{item.text}\n\nEvidence (JSON):\n"
            f"{json.dumps(evidence, default=str)[:4000]}\n\nThe summarizer's draft:\n"
            f"Statement: {draft.statement}\nApplies when: {draft.applies_when}\n"
            f"Not when: {draft.not_when}")  # fmt: skip


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
