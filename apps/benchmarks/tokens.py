"""Token economy of real sessions: the prompt tokens the active context spent against what a
passive context (KOPE's ablation baseline) would have spent, read from finished sessions'
journals. `manage.py bench kernels` reports it over the sessions of a whole suite run.

Per iteration that assembled a context (a `context_assembled` event; the starting kernel's
round assembles none):

* active: the tokens of the context the loop assembled and recorded (the event's `tokens`);
* passive: `pack_passive` of everything the session had journaled before that event, oldest
  first, cut at the model's context window: the target's reference documents and each
  operator's task (which the active context holds too, so both start from the same material),
  then every event as it came, its payload as JSON, a `candidate_proposed` also with the
  kernel source it names (the journal stores it by hash). Left out are the events that
  describe prompts rather than add to what was produced: `context_assembled` (the active
  context's own record) and `model_called` (token usage).

Both are counted with the project's tiktoken encoding (apps/core/tokens.py, o200k_base). The
ratio is the sum of passive tokens over the sum of active tokens, all iterations of all
sessions together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from apps.agents.assembly import task_text
from apps.agents.coldstart import cold_start_documents
from apps.agents.context import DEFAULT_ENCODING, ContextItem, Tier, pack_passive
from apps.benchmarks.evaluator import BenchmarkError
from apps.devices.models import KernelSource
from apps.memory.models import Journal, JournalEvent
from apps.operators.models import OperatorVersion
from apps.runs.progress import brief_of

DEFAULT_WINDOW_TOKENS = 200_000
NOT_PASSIVE = frozenset({"context_assembled", "model_called"})


@dataclass(frozen=True)
class IterationTokens:
    session_id: int
    operator: str
    iteration: int
    active: int
    passive: int


def context_economy(session_ids: list[int], window_tokens: int = DEFAULT_WINDOW_TOKENS
                    ) -> dict[str, Any]:  # fmt: skip
    """Active against passive prompt tokens over every iteration of the sessions (see the
    module docstring); BenchmarkError without sessions or without an assembled context."""
    if not session_ids:
        raise BenchmarkError("no sessions to measure the context economy of")
    iterations = [it for pk in session_ids for it in session_iterations(pk, window_tokens)]
    if not iterations:
        raise BenchmarkError(f"sessions {session_ids} assembled no context: nothing to compare")
    active = sum(it.active for it in iterations)
    passive = sum(it.passive for it in iterations)
    return {
        "setting": setting(window_tokens),
        "sessions": len(session_ids),
        "iterations": len(iterations),
        "active_tokens": active,
        "passive_tokens": passive,
        "active_tokens_per_iteration": active / len(iterations),
        "passive_tokens_per_iteration": passive / len(iterations),
        "active_vs_passive_token_ratio": passive / active,
        "window_tokens": window_tokens,
        "encoding": DEFAULT_ENCODING,
    }


def setting(window_tokens: int) -> str:
    return (
        "real sessions' journals: per iteration, active = the tokens of the context the loop "
        "assembled (context_assembled); passive = the reference documents, the tasks and "
        "every journaled event before it (proposals with their kernel source, verdicts, "
        f"cases, tool output, scores), oldest first, cut at a {window_tokens:,}-token window "
        f"(pack_passive); {DEFAULT_ENCODING} tokens"
    )


def session_iterations(session_id: int, window_tokens: int) -> list[IterationTokens]:
    """One entry per `context_assembled` event of the session, in journal order."""
    journal = Journal.objects.filter(pk=session_id).first()
    if journal is None:
        raise BenchmarkError(f"session {session_id} has no journal")
    history = PassiveHistory(window_tokens, cold_start_documents(journal.target))
    iterations = []
    for event in JournalEvent.objects.filter(session_id=session_id).order_by("seq"):
        if event.kind == "context_assembled":
            payload = event.payload
            iterations.append(IterationTokens(session_id, payload["operator"],
                                              payload["iteration"], payload["tokens"],
                                              history.tokens()))  # fmt: skip
        elif event.kind not in NOT_PASSIVE:
            history.extend(passive_items(event, journal.target))
    return iterations


@dataclass
class PassiveHistory:
    """The passive context of a session as it grows, packed only when it could have changed:
    once an item is cut, everything appended after it is cut too (pack_passive keeps a
    prefix), so the packing stays what it was."""

    window_tokens: int
    items: list[ContextItem]
    packed_tokens: int | None = None
    full: bool = False  # an item was cut: the packing no longer changes

    def extend(self, items: list[ContextItem]) -> None:
        if not self.full:
            self.packed_tokens = None
        self.items += items

    def tokens(self) -> int:
        if self.packed_tokens is None:
            packed = pack_passive(self.items, self.window_tokens)
            self.packed_tokens, self.full = packed.tokens, bool(packed.keys_in("cut"))
        return self.packed_tokens


def passive_items(event: JournalEvent, target: str) -> list[ContextItem]:
    """What the event adds to a passive context: its payload; for a new operator its task
    first, for a proposal its kernel source after."""
    key = f"{event.seq}:{event.kind}"
    payload = event.payload
    items = [ContextItem(key, Tier.HOT, f"{event.kind}: {json.dumps(payload, sort_keys=True)}")]
    if event.kind == "operator_started":
        version = OperatorVersion.objects.select_related("operator").get(pk=payload["version_id"])
        items.insert(0, ContextItem(f"{key}:task", Tier.HOT, task_text(brief_of(version), target)))
    if event.kind == "candidate_proposed":
        source = KernelSource.objects.filter(sha256=payload["source_sha256"]).first()
        if source is not None:
            items.append(ContextItem(f"{key}:source", Tier.HOT, source.text))
    return items
