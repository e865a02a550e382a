"""Sessions for the report tests: a real one run inline, and one written as journal events."""

from __future__ import annotations

from apps.accounts.models import Team
from apps.memory.journal import journal_append
from apps.runs.config import Budgets, Measurement
from apps.runs.evaluators import evaluate_here
from apps.runs.loop import advance
from apps.runs.models import OptimizationSession
from apps.runs.policies import policy_for
from apps.runs.services import session_create
from tests.factories import stored_builtin

FAST = Measurement(seeds=1, warmup=1, repeats=5)


def real_session(team: Team, operator: str = "relu", rounds: int = 2) -> OptimizationSession:
    """One operator, a few rounds, evaluated in this process by the device pipeline."""
    stored_builtin(operator)
    session = session_create(team=team, user=None, operators=[operator], measurement=FAST,
                             budgets=Budgets(rounds=rounds), start=False)  # fmt: skip
    while advance(session.pk, evaluate=evaluate_here, policy_for=policy_for):
        pass
    session.refresh_from_db()
    assert session.status == "finished", session.status_reason
    return session


def journal_session(
    team: Team,
    *,
    mode: str = "read_write",
    best: dict[str, float],
    unfinished: tuple[str, ...] = (),
) -> OptimizationSession:
    """Operators that start at 10 ms and reach `best` ms (speedup vs PyTorch 20 / best), plus
    `unfinished` ones that have a failed start and no `operator_finished` event."""
    versions = {slug: stored_builtin(slug) for slug in [*best, *unfinished]}
    session = session_create(team=team, user=None, operators=list(versions), memory_mode=mode,
                             start=False)  # fmt: skip
    for slug, best_ms in best.items():
        start = case(session, versions[slug].pk, 0, None, "starting kernel", 10.0)
        top = case(session, versions[slug].pk, 1, start, f"tile {slug} | by 32", best_ms)
        journal_append(session_id=session.pk, kind="operator_finished", payload={
            "operator": slug, "reason": "round budget spent (2 rounds)", "rounds_used": 2,
            "best_case_id": top, "start_latency_ms": 10.0, "best_latency_ms": best_ms,
            "speedup_vs_start": 10.0 / best_ms, "speedup_vs_reference": 20.0 / best_ms,
        })  # fmt: skip
    for slug in unfinished:
        case(session, versions[slug].pk, 0, None, "starting kernel", None)
    return session


def case(session: OptimizationSession, version_id: int, iteration: int, parent: int | None,
         strategy: str, latency: float | None) -> int:  # fmt: skip
    event = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": iteration, "version_id": version_id, "target": "cpu-c",
        "strategy": strategy, "outcome": "improved" if latency else "compile_error",
        "correct": latency is not None, "parent_case_id": parent, "latency_ms": latency,
        "speedup_vs_reference": 20.0 / latency if latency else None,
    })  # fmt: skip
    return event.pk
