"""The interface between the loop and a policy: what a policy sees, what it may call, what it
returns. The offline search policy and the Claude policy both implement `Policy`; the loop
(apps/runs/loop.py) neither knows nor cares which one it drives.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from apps.agents.context import PackedContext
from apps.devices.digests import source_digest
from apps.memory.case_views import CaseView
from apps.memory.retrieval import Hit
from apps.memory.values import Distiller


@dataclass(frozen=True)
class OperatorBrief:
    slug: str
    name: str
    family: str
    description: str
    version_id: int
    max_abs: float
    max_rel: float

    @property
    def fast_math_allowed(self) -> bool:
        """-ffast-math reassociates and drops NaN/inf handling: only where the tolerance is
        loose enough that a reordered float sum still passes."""
        return self.max_rel >= 1e-3 and self.max_abs >= 1e-4


MAX_STRATEGY_CHARS = 200


# A kernel as it runs: its source's sha256 (as the journal stores it), its flags, its threads.
KernelKey = tuple[str, tuple[str, ...], int]


@dataclass(frozen=True)
class Candidate:
    source: str
    strategy: str  # a named strategy with parameters, e.g. "interchange(loop=L1)"
    flags: tuple[str, ...] = ()
    threads: int = 1

    @property
    def kernel_key(self) -> KernelKey:
        return source_digest(self.source), tuple(self.flags), self.threads


def bounded_strategy(strategy: str) -> str:
    """A strategy name as the journal and the case keep it: one line of at most
    MAX_STRATEGY_CHARS characters, without NUL (whatever a policy returned)."""
    text = " ".join(strategy.replace("\x00", "").split())
    if len(text) <= MAX_STRATEGY_CHARS:
        return text or "unnamed strategy"
    return text[: MAX_STRATEGY_CHARS - 1] + "…"


def bounded_candidate(candidate: Candidate) -> Candidate:
    """The candidate as the loop records it: its strategy bounded, NUL gone from its flags
    (PostgreSQL's JSON holds no NUL)."""
    flags = tuple(flag.replace("\x00", "") for flag in candidate.flags)
    return replace(candidate, strategy=bounded_strategy(candidate.strategy), flags=flags)


@dataclass(frozen=True)
class Attempt:
    """An evaluated candidate as the policy sees it."""

    case_id: int
    candidate: Candidate
    outcome: str
    correct: bool
    latency_ms: float | None
    verdict_summary: str  # a few lines: compile errors, failing cases, timing


# What a case's outcome is when its candidate broke the kernel rather than timing slower.
FAILED_OUTCOMES = frozenset({"incorrect", "crashed", "compile_error", "timed_out", "rejected"})


@dataclass(frozen=True)
class Situation:
    session_id: int
    team_id: int
    target: str
    operator: OperatorBrief
    stage: str  # "correctness" until a correct kernel exists, then "optimization"
    iteration: int
    rounds_left: int
    incumbent: Attempt | None  # the best correct attempt so far
    latest: Attempt | None  # the previous attempt, whatever became of it
    tried: frozenset[str]  # strategies already tried on the incumbent
    context: PackedContext | None  # None when memory is off and there is nothing to pack
    retrieved: list[Hit] = field(default_factory=list)
    hot_rules: list[dict[str, Any]] = field(default_factory=list)  # {"key", "statement", ...}
    seed: int = 0
    broke: frozenset[str] = frozenset()  # strategies whose candidates of this operator failed
    # strategies that did not improve a kernel with the incumbent's very source (another flag
    # set or thread count): on the same code they mean the same change
    lost: frozenset[str] = frozenset()
    # the kernels this operator already ran in this session: proposing one again only measures
    # it again (an interchange of an interchanged loop gives its parent back)
    evaluated: frozenset[KernelKey] = frozenset()


@dataclass(frozen=True)
class Proposal:
    candidate: Candidate | None  # None: nothing more to try; `rationale` says why
    adopted: list[dict[str, str]] = field(default_factory=list)  # [{"key", "why"}]
    rationale: str = ""
    paused_reason: str = ""  # set when the policy cannot go on for now (its API gave up)
    retrieved: list[str] = field(default_factory=list)  # keys it looked up itself (searches)


class Tools(Protocol):
    """What the loop offers a policy besides proposing: memory search, the experience forest
    read case by case, and diagnostics. A policy reads memory only through these."""

    def search_memory(self, text: str, limit: int = 8) -> list[Hit]: ...

    def case(self, case_id: int) -> CaseView | None: ...

    def tree(self, case: CaseView) -> list[CaseView]:
        """The cases of `case`'s operator in its session, on its target, in iteration order."""
        ...

    def children(self, case: CaseView) -> list[CaseView]:
        """The cases made from `case` in its session, in iteration order."""
        ...

    def proposed(self, case: CaseView) -> Candidate:
        """The candidate `case` evaluated, as it was proposed (flags and threads included)."""
        ...

    def diagnose(self, candidate: Candidate, *, profile: bool, debug: bool) -> str: ...

    def note_tool(self, tool: str, summary: str) -> None: ...

    def charge_model_call(self, model: str, usage: dict[str, int], attempts: int) -> None: ...

    def tokens_left(self) -> int: ...


class Policy(Protocol):
    name: str

    def propose(self, situation: Situation, tools: Tools) -> Proposal: ...

    def distiller(self) -> Distiller:
        """How rules are worded from the experiences that earned them (UGC)."""
        ...
