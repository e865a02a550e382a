"""The Claude policy: the model writes kernels through tools, within one iteration.

Each iteration starts a fresh conversation from the assembled context (KOPE rebuilds the
context every iteration rather than growing a transcript). The model may search memory,
profile or debug-build a kernel, declare which retrieved items it adopts and why, and must
write a candidate; calling `evaluate` hands the candidate to the loop, which evaluates and
records it. Every request's usage is charged to the session's token budget. When the API
gives up (retries exhausted, or a refusal), the policy asks the loop to pause the session
with the reason; nothing proposed so far is lost, because nothing is recorded until the
candidate is evaluated.

The API key is only ever handed to the SDK: it is in no prompt, tool result, event or log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from apps.agents.claude.client import ClientSettings, ModelClient, ModelUnavailable
from apps.agents.claude.distiller import model_distiller
from apps.agents.policy import MAX_STRATEGY_CHARS, Candidate, Proposal, Situation, Tools
from apps.devices.evaluator import EVAL_BOUNDS
from apps.memory.values import Distiller

MAX_TURNS = 8
MAX_SOURCE_CHARS = 200_000
SEARCH_LIMIT = 20  # hits search_memory returns at most

SYSTEM_PROMPT = """You optimize compute kernels for the {target} target of the KOPE workbench.
Each iteration you write one candidate kernel that must stay correct (within the operator's
tolerance) and should be faster than the incumbent. The workbench compiles, verifies and times
it; you see the verdict in the next iteration.

Work with the tools:
- search_memory: find earlier attempts and rules about similar operators;
- profile / debug_build: per-line cost and cache misses, or an AddressSanitizer run, of a kernel;
- declare_adoption: say which items from the context or a search you are acting on, and why
  (one sentence each) - only adopted items get credit;
- write_candidate: the complete kernel source, a short strategy name with parameters, and
  optional compiler flags and thread count;
- evaluate: hand the written candidate over; this ends the iteration.

A {target} kernel is C11 with OpenMP, `#include "kope_kernel.h"`, and defines
`int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
int32_t n_outputs, const double *attrs, int32_t n_attrs)` returning 0 on success."""

TOOLS: list[dict[str, Any]] = [
    {
        "name": "search_memory",
        "description": "Search earlier attempts, rules and documents of this team.",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT},
            },
            "required": ["query"],
        },
    },
    {
        "name": "profile",
        "description": "Cachegrind per-line cost and cache misses of the written candidate "
        "(or of the incumbent when none is written yet).",
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "debug_build",
        "description": "Run the written candidate (or the incumbent) under AddressSanitizer "
        "and UndefinedBehaviorSanitizer.",
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "declare_adoption",
        "description": "Declare the retrieved items you act on, with one sentence each.",
        "input_schema": {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"key": {"type": "string"}, "why": {"type": "string"}},
                        "required": ["key", "why"],
                    },
                }
            },
            "required": ["items"],
        },
    },
    {
        "name": "write_candidate",
        "description": "The complete candidate kernel source and what it does.",
        "input_schema": {
            "type": "object",
            "properties": {
                "source": {"type": "string"},
                "strategy": {"type": "string"},
                "flags": {"type": "array", "items": {"type": "string"}},
                "threads": {"type": "integer", "minimum": 1, "maximum": 256},
            },
            "required": ["source", "strategy"],
        },
    },
    {
        "name": "evaluate",
        "description": "Evaluate the written candidate; ends the iteration. A kernel this "
        "operator already ran (same source, flags and threads) is sent back.",
        "input_schema": {"type": "object", "properties": {}},
    },
]


@dataclass
class Turns:
    """What the conversation of one iteration has produced so far."""

    candidate: Candidate | None = None
    adopted: dict[str, str] = field(default_factory=dict)
    searched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    evaluate: bool = False


class ClaudePolicy:
    name = "claude"

    def __init__(self, client: ModelClient, model: str) -> None:
        self.client, self.model = client, model

    @classmethod
    def from_settings(cls, *, model: str = "") -> ClaudePolicy:
        chosen = model or settings.KOPE_CLAUDE_MODEL
        client = ModelClient(
            ClientSettings(
                api_key=settings.ANTHROPIC_API_KEY,
                model=chosen,
                base_url=settings.KOPE_CLAUDE_BASE_URL or None,
                max_retries=settings.KOPE_CLAUDE_MAX_RETRIES,
            )
        )
        return cls(client, chosen)

    def distiller(self) -> Distiller:
        return model_distiller(self.client, self.model)

    def propose(self, situation: Situation, tools: Tools) -> Proposal:
        state = Turns()
        messages: list[dict[str, Any]] = [{"role": "user", "content": opening(situation)}]
        for _ in range(MAX_TURNS):
            if tools.tokens_left() <= 0:
                if new_kernel(state, situation) is not None:
                    break  # the written candidate is paid for: evaluate it
                return Proposal(None, rationale="the token budget is spent")
            try:
                turn = self.client.turn(
                    system=SYSTEM_PROMPT.format(target=situation.target),
                    messages=messages,
                    tools=TOOLS,
                )
            except ModelUnavailable as error:
                return Proposal(None, paused_reason=f"the Claude policy paused: {error}")
            tools.charge_model_call(turn.model, turn.usage.as_json(), turn.attempts)
            messages.append({"role": "assistant", "content": turn.content})
            state.notes += [b["text"] for b in turn.content if b["type"] == "text"]
            calls = [b for b in turn.content if b["type"] == "tool_use"]
            if not calls:
                if new_kernel(state, situation) is not None:
                    break  # it wrote a candidate and stopped talking: evaluate it
                messages.append({"role": "user", "content": nudge(state)})
                continue
            results = [self.run_tool(call, state, situation, tools) for call in calls]
            if state.evaluate and state.candidate is not None:
                break
            messages.append({"role": "user", "content": results})
        return finished(state, situation)

    def run_tool(
        self, call: dict[str, Any], state: Turns, situation: Situation, tools: Tools
    ) -> dict[str, Any]:
        name, arguments = call["name"], call.get("input") or {}
        handler = TOOL_HANDLERS.get(name)
        error = True
        if handler is None:
            text = f"there is no tool named {name!r}"
        elif not isinstance(arguments, dict):
            text = f"{name} takes an object of arguments"
        else:
            try:
                text, error = handler(arguments, state, situation, tools), False
            except ToolInputError as problem:
                text = str(problem)
            except (TypeError, ValueError, AttributeError) as problem:
                text = f"{name} could not use these arguments: {problem}"
        tools.note_tool(name, text if error else summary_of(name, arguments, text))
        return {"type": "tool_result", "tool_use_id": call["id"], "content": text,
                "is_error": error}  # fmt: skip


NUDGE = "Write a candidate with write_candidate, then call evaluate."
ALREADY_RAN = ("this kernel already ran for this operator (the same source, flags and threads): "
               "change it, then evaluate")  # fmt: skip


def new_kernel(state: Turns, situation: Situation) -> Candidate | None:
    """The written candidate, unless the operator already ran its kernel: handed over, it
    would only be measured again (what `evaluate` refuses)."""
    if state.candidate is None or state.candidate.kernel_key in situation.evaluated:
        return None
    return state.candidate


def nudge(state: Turns) -> str:
    return NUDGE if state.candidate is None else f"The written candidate: {ALREADY_RAN}."


class ToolInputError(ValueError):
    """The model called a tool with arguments it cannot use; told back to the model."""


def opening(situation: Situation) -> str:
    context = situation.context.text if situation.context else ""
    where = (
        f"Iteration {situation.iteration} ({situation.stage} stage), "
        f"{situation.rounds_left} rounds left."
    )
    if situation.incumbent is None:
        task = (
            "There is no correct kernel yet: write one (repair the latest attempt if there is one)."
        )
    else:
        task = "Make the incumbent faster without breaking correctness."
    return f"{context}\n{where} {task}"


def search_tool(arguments: dict[str, Any], state: Turns, situation: Situation,
                tools: Tools) -> str:  # fmt: skip
    query = str(arguments.get("query", "")).strip()
    if not query:
        raise ToolInputError("search_memory needs a query")
    limit = arguments.get("limit", 8)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= SEARCH_LIMIT:
        raise ToolInputError(f"limit must be a whole number from 1 to {SEARCH_LIMIT}")
    hits = tools.search_memory(query, limit)
    state.searched += [h.key for h in hits if h.key not in state.searched]
    if not hits:
        return "nothing found"
    return "\n\n".join(f"[{h.key}] {h.text}" for h in hits)


def kernel_to_diagnose(state: Turns, situation: Situation) -> Candidate:
    if state.candidate is not None:
        return state.candidate
    if situation.incumbent is not None:
        return situation.incumbent.candidate
    raise ToolInputError("write a candidate first: there is no kernel to diagnose yet")


def profile_tool(arguments: dict[str, Any], state: Turns, situation: Situation,
                 tools: Tools) -> str:  # fmt: skip
    return tools.diagnose(kernel_to_diagnose(state, situation), profile=True, debug=False)


def debug_tool(arguments: dict[str, Any], state: Turns, situation: Situation,
               tools: Tools) -> str:  # fmt: skip
    return tools.diagnose(kernel_to_diagnose(state, situation), profile=False, debug=True)


def adoption_tool(arguments: dict[str, Any], state: Turns, situation: Situation,
                  tools: Tools) -> str:  # fmt: skip
    items = arguments.get("items")
    if not isinstance(items, list) or not items:
        raise ToolInputError("declare_adoption needs a list of {key, why} items")
    known = {h.key for h in situation.retrieved} | {r["key"] for r in situation.hot_rules}
    known |= set(state.searched)
    accepted, unknown = [], []
    for item in items:
        key, why = str(item.get("key", "")), str(item.get("why", "")).strip()
        if key in known and why:
            state.adopted[key] = why[:500]
            accepted.append(key)
        else:
            unknown.append(key or "(no key)")
    reply = f"adopted: {', '.join(accepted) or 'none'}"
    if unknown:
        reply += f"; not in your context or searches (or no reason given): {', '.join(unknown)}"
    return reply


def write_tool(arguments: dict[str, Any], state: Turns, situation: Situation,
               tools: Tools) -> str:  # fmt: skip
    source, strategy = arguments.get("source"), str(arguments.get("strategy", "")).strip()
    if not isinstance(source, str) or not source.strip():
        raise ToolInputError("write_candidate needs the complete kernel source")
    if len(source) > MAX_SOURCE_CHARS:
        raise ToolInputError(f"the source is {len(source)} characters; the limit is "
                             f"{MAX_SOURCE_CHARS}")  # fmt: skip
    if "\x00" in source:
        raise ToolInputError("the source holds a NUL character")
    if len(strategy) > MAX_STRATEGY_CHARS:
        raise ToolInputError(f"the strategy name is {len(strategy)} characters; the limit is "
                             f"{MAX_STRATEGY_CHARS}: name it briefly")  # fmt: skip
    flags = arguments.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ToolInputError("flags must be a list of strings")
    threads = arguments.get("threads", 1)
    low, high = EVAL_BOUNDS["threads"]
    if not isinstance(threads, int) or isinstance(threads, bool) or not low <= threads <= high:
        raise ToolInputError(f"threads must be a whole number from {low} to {high}")
    state.candidate = Candidate(source, strategy or "model-written kernel", tuple(flags), threads)
    return f"written ({len(source)} characters): call evaluate to hand it over"


def evaluate_tool(arguments: dict[str, Any], state: Turns, situation: Situation,
                  tools: Tools) -> str:  # fmt: skip
    if state.candidate is None:
        raise ToolInputError("write a candidate with write_candidate before evaluate")
    if new_kernel(state, situation) is None:
        raise ToolInputError(ALREADY_RAN)
    state.evaluate = True
    return "handed over for evaluation"


TOOL_HANDLERS = {
    "search_memory": search_tool,
    "profile": profile_tool,
    "debug_build": debug_tool,
    "declare_adoption": adoption_tool,
    "write_candidate": write_tool,
    "evaluate": evaluate_tool,
}


def summary_of(name: str, arguments: dict[str, Any], result: str) -> str:
    if name == "write_candidate":
        return f"wrote {arguments.get('strategy', 'a candidate')}: {result}"
    if name == "search_memory":
        return f"searched {json.dumps(arguments.get('query', ''))[:200]}: {result[:300]}"
    return result[:500]


def finished(state: Turns, situation: Situation) -> Proposal:
    adopted = [{"key": key, "why": why} for key, why in state.adopted.items()]
    rationale = " ".join(state.notes)[:2000]
    candidate = new_kernel(state, situation)
    if candidate is None:
        return Proposal(
            None,
            adopted=adopted,
            rationale=rationale or f"no new kernel written in {MAX_TURNS} turns",
        )
    return Proposal(candidate, adopted=adopted, rationale=rationale,
                    retrieved=list(state.searched))  # fmt: skip
