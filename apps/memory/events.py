"""The journal's event kinds and their typed payloads.

A payload is validated on the way in: an event the journal accepts can always be read back
into its dataclass, which is what lets the forest be rebuilt from the journal alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from apps.core.errors import DomainError

OUTCOMES = ("improved", "regressed", "no_change", "compile_error", "incorrect", "crashed",
            "timed_out", "rejected")  # fmt: skip


class PayloadError(DomainError):
    code = "invalid_event"


@dataclass(frozen=True)
class CaseRecorded:
    """One attempt and its measured outcome."""

    iteration: int
    version_id: int
    target: str
    strategy: str
    outcome: str
    correct: bool
    parent_case_id: int | None = None  # a case's id is its journal event's id
    tags: list[str] = field(default_factory=list)
    source_sha256: str | None = None
    validation: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None
    speedup_vs_reference: float | None = None
    speedup_vs_parent: float | None = None
    feedback: dict[str, Any] = field(default_factory=dict)
    confidence: float = 1.0
    retrieved: list[str] = field(default_factory=list)
    adopted: list[dict[str, str]] = field(default_factory=list)

    def check(self) -> None:
        if self.outcome not in OUTCOMES:
            raise PayloadError(f"outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")
        if self.iteration < 0:
            raise PayloadError("iteration must not be negative")
        if not 0.0 <= self.confidence <= 1.0:
            raise PayloadError(f"confidence {self.confidence} is not between 0 and 1")
        if self.outcome in ("improved", "regressed", "no_change") and not self.correct:
            raise PayloadError(f"an attempt that {self.outcome} must be correct")
        unknown = {a.get("key") for a in self.adopted} - set(self.retrieved)
        if unknown:
            raise PayloadError(
                f"adopted items that were not retrieved: {', '.join(sorted(map(str, unknown)))}"
            )


@dataclass(frozen=True)
class SessionNote:
    """Free text an engineer or the orchestrator adds to a session's history."""

    text: str

    def check(self) -> None:
        if not self.text.strip():
            raise PayloadError("a note needs text")


STAGES = ("correctness", "optimization")


@dataclass(frozen=True)
class ValueUpdated:
    """ATU at the end of a stage: its score, and each credited item's old and new V."""

    stage: str
    operator: str
    score: float
    items: list[dict[str, Any]]  # [{"key", "feedback", "old", "new", "retrievals"}]

    def check(self) -> None:
        if self.stage not in STAGES:
            raise PayloadError(f"stage {self.stage!r} is not one of {', '.join(STAGES)}")


# --- the loop's steps (apps/runs/loop.py); `operator` is the operator's slug ----------------


@dataclass(frozen=True)
class Step:
    """A step of the loop with no rule beyond its fields' types."""

    def check(self) -> None:
        return None


@dataclass(frozen=True)
class SessionStarted(Step):
    policy: str
    memory_mode: str
    operators: list[str]
    target: str


@dataclass(frozen=True)
class OperatorStarted(Step):
    operator: str
    version_id: int
    position: int
    start: str  # where the first kernel comes from: "starting kernel" or "uploaded"


@dataclass(frozen=True)
class IterationStarted(Step):
    operator: str
    iteration: int
    stage: str
    rounds_left: int


@dataclass(frozen=True)
class ContextAssembled(Step):
    """What the policy was shown: tokens per tier, what was admitted, cut, retrieved."""

    operator: str
    iteration: int
    tokens: int
    budget: int
    tokens_per_tier: dict[str, int]
    admitted: list[str]
    shortened: list[str]
    cut: list[str]
    retrieved: list[dict[str, Any]]  # [{"key", "kind", "operator", "similarity", "value"}]
    hot_rules: list[str]


@dataclass(frozen=True)
class CandidateProposed(Step):
    operator: str
    iteration: int
    strategy: str
    source_sha256: str
    parent_case_id: int | None
    flags: list[str] = field(default_factory=list)
    threads: int = 1
    adopted: list[dict[str, str]] = field(default_factory=list)
    retrieved: list[str] = field(default_factory=list)  # what was in context or looked up
    rationale: str = ""

    def check(self) -> None:
        if not self.strategy.strip():
            raise PayloadError("a candidate needs a strategy")
        if self.threads < 1:
            raise PayloadError(f"threads must be at least 1, got {self.threads}")


@dataclass(frozen=True)
class ModelCalled(Step):
    """One request to the model: its usage, charged to the session's token budget."""

    operator: str
    iteration: int
    model: str
    usage: dict[str, int]
    attempts: int = 1


@dataclass(frozen=True)
class ToolCalled(Step):
    operator: str
    iteration: int
    tool: str
    summary: str


@dataclass(frozen=True)
class Evaluated(Step):
    """`compiled`, `case_results` and `timed`: one part of the verdict each."""

    operator: str
    iteration: int
    evaluation_id: int
    ok: bool
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IncumbentReplaced(Step):
    operator: str
    iteration: int
    case_id: int
    previous_case_id: int | None
    latency_ms: float
    previous_latency_ms: float | None


@dataclass(frozen=True)
class AdoptionRecorded(Step):
    operator: str
    iteration: int
    case_id: int
    retrieved: list[str]
    adopted: list[dict[str, str]]


@dataclass(frozen=True)
class StageScored(Step):
    operator: str
    stage: str
    score: float
    retrieved: list[str]
    adopted: list[str]
    latency_first_ms: float | None = None
    latency_best_ms: float | None = None

    def check(self) -> None:
        if self.stage not in STAGES:
            raise PayloadError(f"stage {self.stage!r} is not one of {', '.join(STAGES)}")


@dataclass(frozen=True)
class RuleProposed(Step):
    rule_id: int
    source_key: str
    statement: str


@dataclass(frozen=True)
class OperatorFinished(Step):
    operator: str
    reason: str
    rounds_used: int
    best_case_id: int | None
    start_latency_ms: float | None
    best_latency_ms: float | None
    speedup_vs_start: float | None
    speedup_vs_reference: float | None


@dataclass(frozen=True)
class SessionControlled(Step):
    """`session_paused`, `session_resumed`, `session_stopped`, `session_finished`."""

    status: str
    reason: str = ""
    actor: str = ""


STEPS: dict[str, type[Step]] = {
    "session_started": SessionStarted,
    "operator_started": OperatorStarted,
    "iteration_started": IterationStarted,
    "context_assembled": ContextAssembled,
    "candidate_proposed": CandidateProposed,
    "model_called": ModelCalled,
    "tool_called": ToolCalled,
    "compiled": Evaluated,
    "case_results": Evaluated,
    "timed": Evaluated,
    "incumbent_replaced": IncumbentReplaced,
    "adoption_recorded": AdoptionRecorded,
    "stage_scored": StageScored,
    "rule_proposed": RuleProposed,
    "operator_finished": OperatorFinished,
    "session_paused": SessionControlled,
    "session_resumed": SessionControlled,
    "session_stopped": SessionControlled,
    "session_finished": SessionControlled,
}

Payload = CaseRecorded | SessionNote | ValueUpdated | Step
PAYLOADS: dict[str, type[Payload]] = {
    "case_recorded": CaseRecorded,
    "session_note": SessionNote,
    "value_updated": ValueUpdated,
    **STEPS,
}


def typed_payload(kind: str, payload: dict[str, Any]) -> Payload:
    """The payload as its dataclass; PayloadError saying what is wrong, where."""
    schema = PAYLOADS.get(kind)
    if schema is None:
        raise PayloadError(f"event kind {kind!r} is not one of {', '.join(PAYLOADS)}")
    names = {f.name for f in fields(schema)}
    unknown = set(payload) - names
    if unknown:
        raise PayloadError(f"{kind}: unknown fields {', '.join(sorted(unknown))}")
    try:
        typed = schema(**payload)
    except TypeError as error:
        raise PayloadError(f"{kind}: {error}") from None
    typed.check()
    return typed


def payload_of(event: Payload) -> dict[str, Any]:
    return asdict(event)
