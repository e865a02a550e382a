from __future__ import annotations

from pathlib import Path

import pytest

from apps.devices import symbols

OWN_SYSTEM_CALLS = "makes system calls of its own"


@pytest.fixture
def past_the_scan(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """For the kernels that reach the layers behind the static scan with a `syscall`
    instruction of their own: the scan's finding is set aside (and kept here, in this process,
    for the test to see the scan did object), so that what the sandbox does at run time is
    tested too."""
    objections: list[str] = []

    def all_but_own_system_calls(path: Path) -> list[str]:
        problems = symbols.symbol_problems(path)
        objections.extend(p for p in problems if p.startswith(OWN_SYSTEM_CALLS))
        return [p for p in problems if not p.startswith(OWN_SYSTEM_CALLS)]

    monkeypatch.setattr("apps.devices.evaluator.pipeline.symbol_problems", all_but_own_system_calls)
    return objections
