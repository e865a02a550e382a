"""A session's configuration: everything needed to run it again, frozen when it is created."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.core.errors import DomainError, require_whole_numbers
from apps.devices.evaluator import EVAL_BOUNDS
from apps.memory.values import MemoryMode

POLICIES = ("offline", "claude")
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Budgets:
    rounds: int = 30  # per operator, shared by repair and optimization (SAGE)
    tokens: int = 1_000_000  # model tokens per operator (KOPE)
    plateau: int = 10  # optimization rounds in a row without a new incumbent
    context_tokens: int = 12_000  # the assembled context of one iteration

    def check(self) -> None:
        bounds = {"rounds": (1, None), "tokens": (1, None), "plateau": (1, None),
                  "context_tokens": (500, None)}  # fmt: skip
        require_whole_numbers("budget", bounds, asdict(self))


@dataclass(frozen=True)
class Measurement:
    seeds: int = 3
    warmup: int = 5
    repeats: int = 100

    def check(self) -> None:
        # a median of fewer than three timed calls is one outlier away from any figure
        bounds = {"seeds": EVAL_BOUNDS["seeds"], "warmup": EVAL_BOUNDS["warmup"],
                  "repeats": (3, EVAL_BOUNDS["repeats"][1])}  # fmt: skip
        require_whole_numbers("measurement", bounds, asdict(self))


@dataclass(frozen=True)
class OperatorEntry:
    slug: str
    version_id: int
    version: int
    start_source_sha256: str | None = None  # an uploaded starting kernel, else the built-in one


@dataclass(frozen=True)
class SessionConfig:
    target: str
    policy: str
    memory_mode: str
    operators: list[OperatorEntry]
    model: str = ""
    seed: int = 0
    budgets: Budgets = field(default_factory=Budgets)
    measurement: Measurement = field(default_factory=Measurement)
    suite: dict[str, Any] | None = None  # {"id", "slug", "name"} when run from a suite
    code_version: str = ""

    def check(self) -> None:
        if self.policy not in POLICIES:
            raise DomainError(f"policy {self.policy!r} is not one of {', '.join(POLICIES)}")
        if self.memory_mode not in {m.value for m in MemoryMode}:
            modes = ", ".join(m.value for m in MemoryMode)
            raise DomainError(f"memory mode {self.memory_mode!r} is not one of {modes}")
        if not self.operators:
            raise DomainError("a session needs at least one operator")
        self.budgets.check()
        self.measurement.check()

    @property
    def memory(self) -> MemoryMode:
        return MemoryMode(self.memory_mode)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionConfig:
        return cls(
            **{k: v for k, v in data.items() if k not in ("operators", "budgets", "measurement")},
            operators=[OperatorEntry(**entry) for entry in data["operators"]],
            budgets=Budgets(**data.get("budgets", {})),
            measurement=Measurement(**data.get("measurement", {})),
        )


def default_model() -> str:
    return str(settings.KOPE_CLAUDE_MODEL)


@functools.cache
def code_version() -> str:
    """The commit the workbench runs from (with "+dirty" for local changes), for reproduction:
    KOPE_CODE_VERSION where it is set (an image has no checkout), else git's."""
    if settings.CODE_VERSION:
        return str(settings.CODE_VERSION)
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return head + ("+dirty" if dirty.strip() else "")
