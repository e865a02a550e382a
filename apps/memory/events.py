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


Payload = CaseRecorded | SessionNote | ValueUpdated
PAYLOADS: dict[str, type[CaseRecorded] | type[SessionNote] | type[ValueUpdated]] = {
    "case_recorded": CaseRecorded,
    "session_note": SessionNote,
    "value_updated": ValueUpdated,
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
