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
# The offline policy's written-in knowledge (its strategy order, its cost-model checks, its
# preferred parameters), or none of it: a blank prior learns only from memory, the setting in
# which `bench kernels` measures what memory teaches.
OFFLINE_PRIORS = ("written-in", "blank")
# What an iteration may recall: all of the team's memory, or only what earlier sessions
# recorded on other operator families (leave-one-family-out: no operator sees its own cases).
MEMORY_SCOPES = ("team", "other-families")
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
    offline_prior: str = "written-in"
    memory_scope: str = "team"
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
        if self.offline_prior not in OFFLINE_PRIORS:
            raise DomainError(f"offline prior {self.offline_prior!r} is not one of "
                              f"{', '.join(OFFLINE_PRIORS)}")  # fmt: skip
        if self.offline_prior != "written-in" and self.policy != "offline":
            raise DomainError(f"only the offline policy has a prior to leave blank, not "
                              f"{self.policy}")  # fmt: skip
        if self.memory_scope not in MEMORY_SCOPES:
            raise DomainError(f"memory scope {self.memory_scope!r} is not one of "
                              f"{', '.join(MEMORY_SCOPES)}")  # fmt: skip
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
