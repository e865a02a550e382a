"""What an evaluation is asked to do and how it may fail: the target, the bounds and settings
of an evaluation, and the error that is not the candidate's fault."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

from apps.core.errors import require_whole_numbers

TARGET = "cpu-c"
# What one evaluation may ask for; the KOPE_EVAL_* settings have the same bounds.
EVAL_BOUNDS: dict[str, tuple[int, int]] = {
    "seeds": (1, 20), "warmup": (0, 1000), "repeats": (1, 100_000), "threads": (1, 1024),
    "measurement": (0, 1_000_000),
}  # fmt: skip


class EvaluationError(RuntimeError):
    """The evaluation could not be carried out (not the candidate's fault): say why."""


@dataclass(frozen=True)
class EvalSettings:
    seeds: int = 3
    warmup: int = 5
    repeats: int = 100
    threads: int = 1
    timing: bool = True
    profile: bool = False
    debug: bool = False
    extra_flags: tuple[str, ...] = ()
    # The kernel the candidate changed (a stored source's sha256, and its flags): timed beside
    # it in the same process, so the two compare under the same conditions.
    baseline_sha256: str = ""
    baseline_flags: tuple[str, ...] = ()
    # 0 for the first measurement under these settings, which every later ask reuses; n for
    # the n-th asked for again on purpose (a stored verdict is never overwritten).
    measurement: int = 0

    @classmethod
    def from_settings(cls, **overrides: Any) -> EvalSettings:
        defaults = {
            "seeds": settings.KOPE_EVAL_SEEDS, "warmup": settings.KOPE_EVAL_WARMUP,
            "repeats": settings.KOPE_EVAL_REPEATS, "threads": settings.KOPE_EVAL_THREADS,
        }  # fmt: skip
        return cls(**{**defaults, **overrides})

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> EvalSettings:
        return cls(**{**stored, "extra_flags": tuple(stored.get("extra_flags", ())),
                      "baseline_flags": tuple(stored.get("baseline_flags", ()))})  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.baseline_sha256:  # so settings stored before baselines keep their key
            del data["baseline_sha256"], data["baseline_flags"]
        if not self.measurement:  # likewise for settings stored before measurements again
            del data["measurement"]
        return data

    def check(self) -> None:
        require_whole_numbers("evaluation", EVAL_BOUNDS, asdict(self))

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode()).hexdigest()
