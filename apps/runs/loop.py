"""The orchestrator: KOPE's loop, one iteration per call of `advance`.

Where a session stands is read from its journal and cases every time, never kept in memory,
so any agent worker can take the next iteration and a worker that died mid-way is replaced
by one that replays the same iteration. Each step is appended under an idempotency key
(`<operator position>:<iteration>:<kind>`): a replayed step finds its event and reuses it (the
candidate already proposed, the evaluation already requested) instead of writing a second
one, and a case is recorded once per iteration by a unique constraint.

An iteration is a short pipeline, each step a function of the app that owns its concept:

1. memory recalls (apps/memory/recall.py: hot rules, retrieval, the cases measured from the
   incumbent's very kernel);
2. agents assemble the context and the situation (apps/agents/assembly.py), and the policy
   proposes (apps/agents/policy.py; the tools it may call are apps/runs/tools.py);
3. the device evaluates (apps/runs/evaluators.py: with which settings, and where);
4. the verdict's steps (apps/devices/verdicts.py) and the case it judges are recorded
   (apps/runs/recording.py), and a stage that ended is closed (apps/memory/stages.py: its
   score, ATU credit, UGC's rule proposals).

Per operator: iteration 0 evaluates the starting kernel; later iterations recall, assemble,
propose, evaluate and record, replacing the incumbent only when a correct candidate is faster
by more than IMPROVEMENT_MARGIN (apps/runs/judging.py). The correctness stage ends at the first
correct kernel, the optimization stage when the operator stops (round or token budget,
plateau, a person's stop: apps/runs/progress.py; or the policy has nothing left).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from apps.agents.assembly import assemble_context, offered_and_adopted
from apps.agents.policy import (
    Candidate,
    Policy,
    Proposal,
    Situation,
    bounded_candidate,
)
from apps.core.locks import advisory_lock
from apps.memory.journal import journal_append, journal_record, step_done
from apps.memory.recall import recall
from apps.memory.stages import Stage, close_stage, correctness_passed, final_stage
from apps.runs.candidates import candidate_of
from apps.runs.config import OperatorEntry, SessionConfig
from apps.runs.evaluators import Evaluate, SessionPaused, carried_out, eval_settings
from apps.runs.models import OptimizationSession
from apps.runs.progress import (
    attempt_of,
    brief_of,
    current_operator,
    kernels_evaluated,
    load_progress,
    operator_started,
    operator_summary,
    operator_version,
    starting_candidate,
    step_key,
    stop_reason,
    tried_of,
)
from apps.runs.queue import queue_moved
from apps.runs.recording import proposal_record, record_case, record_verdict
from apps.runs.tools import LoopTools

if TYPE_CHECKING:
    from apps.devices.models import Evaluation
    from apps.memory.models import Case, JournalEvent

logger = logging.getLogger(__name__)

LOCK_NAMESPACE = 7_001  # pg_advisory_lock(namespace, session id): one advancer per session
STATUS = OptimizationSession.Status

PolicyFactory = Callable[[OptimizationSession, SessionConfig], Policy]
# A proposed candidate, the items adopted for it and the items that were in context.
Proposed = tuple[Candidate, list[dict[str, str]], list[str]]


# --- the entry point ---------------------------------------------------------------------------


def advance(session_id: int, *, evaluate: Evaluate, policy_for: PolicyFactory) -> bool:
    """Run the session's next iteration; True when there is more to do."""
    with session_lock(session_id) as held:
        if not held:
            return False  # another worker is on it
        session = OptimizationSession.objects.select_related("team").get(pk=session_id)
        if session.status in (STATUS.QUEUED, STATUS.RUNNING):
            session = session_begin(session)  # also a session paused before it started
        config = SessionConfig.from_json(session.config)
        entry = current_operator(session, config)
        if session.status == STATUS.STOPPING:
            session_end_stop(session, evaluate=evaluate, policy_for=policy_for)
            return False
        if session.status != STATUS.RUNNING:
            return False
        if entry is None:
            session_finish(session, "every operator is done")
            return False
        try:
            Iteration(session, config, entry, evaluate, policy_for).run()
        except SessionPaused as pause:
            if not session_pause(session, str(pause)):  # a person pressed stop meanwhile
                session_end_stop(session, evaluate=evaluate, policy_for=policy_for,
                                 cause=str(pause))  # fmt: skip
            return False
        return True


def session_lock(session_id: int) -> contextlib.AbstractContextManager[bool]:
    """One advancer per session: released by the database when a worker dies holding it."""
    return advisory_lock(LOCK_NAMESPACE, session_id)


def session_begin(session: OptimizationSession) -> OptimizationSession:
    """Queued becomes running, and the journal opens with `session_started` (once)."""
    if step_done(session.pk, "session:started") and session.status == STATUS.RUNNING:
        return session
    config = SessionConfig.from_json(session.config)
    queued = OptimizationSession.objects.filter(pk=session.pk, status=STATUS.QUEUED)
    if queued.update(status=STATUS.RUNNING):
        queue_moved()  # the sessions queued behind it move up
    journal_append(session_id=session.pk, kind="session_started", step="session:started",
                   payload={"policy": config.policy, "memory_mode": config.memory_mode,
                            "operators": [e.slug for e in config.operators],
                            "target": config.target})  # fmt: skip
    session.refresh_from_db()
    return session


def session_finish(session: OptimizationSession, reason: str) -> None:
    with transaction.atomic():
        OptimizationSession.objects.filter(pk=session.pk).update(
            status=STATUS.FINISHED, status_reason=reason, finished_at=timezone.now()
        )
        queue_moved()
        journal_append(session_id=session.pk, kind="session_finished", step="session:finished",
                       payload={"status": STATUS.FINISHED, "reason": reason})  # fmt: skip


def session_pause(session: OptimizationSession, reason: str) -> bool:
    """Pause a queued or running session with the reason; False when it was neither (a person
    is stopping it, paused it or it ended: a stop then ends it with `session_end_stop`)."""
    with transaction.atomic():
        paused = OptimizationSession.objects.filter(
            pk=session.pk, status__in=(STATUS.QUEUED, STATUS.RUNNING)
        ).update(status=STATUS.PAUSED, status_reason=reason)
        if paused:
            journal_append(session_id=session.pk, kind="session_paused",
                           payload={"status": STATUS.PAUSED, "reason": reason})  # fmt: skip
            queue_moved()
    return bool(paused)


def session_end_stop(session: OptimizationSession, *, evaluate: Evaluate,
                     policy_for: PolicyFactory, cause: str = "") -> None:  # fmt: skip
    """A session a person is stopping ends: the operator it interrupted is scored, credited and
    finished, then the session, with `cause` (what cut the last iteration short) in its reason.
    Its steps are keyed, so a replay after a worker died records each of them once."""
    session.refresh_from_db()
    if session.status != STATUS.STOPPING:
        return
    config = SessionConfig.from_json(session.config)
    entry = current_operator(session, config)
    reason = session.status_reason or "stopped by request"
    if entry is not None and operator_started(session, config, entry):
        Iteration(session, config, entry, evaluate, policy_for).finish_operator(reason)
    session_finish(session, f"{reason} ({cause})" if cause else reason)


# --- one iteration -----------------------------------------------------------------------------


class Iteration:
    """One iteration of one operator: start the operator -> stop? -> propose (recall, assemble,
    ask the policy) -> evaluate -> report the verdict -> record the case -> close the stage."""

    def __init__(self, session: OptimizationSession, config: SessionConfig, entry: OperatorEntry,
                 evaluate: Evaluate, policy_for: PolicyFactory) -> None:  # fmt: skip
        self.session, self.config, self.entry = session, config, entry
        self.evaluate, self.policy_for = evaluate, policy_for
        self.position = [e.slug for e in config.operators].index(entry.slug)
        self.version = operator_version(entry)
        self.mode = config.memory
        self.progress = load_progress(session, self.version, entry.slug)
        self.n = self.progress.iteration

    def step(self, kind: str) -> str:
        return step_key(self.position, self.n, kind)

    def append(self, kind: str, payload: dict[str, Any], step: str | None = None) -> JournalEvent:
        return self.record_step(kind, payload, step)[0]

    def record_step(
        self, kind: str, payload: dict[str, Any], step: str | None = None
    ) -> tuple[JournalEvent, bool]:
        return journal_record(session_id=self.session.pk, kind=kind, payload=payload,
                              step=self.step(kind) if step is None else step)  # fmt: skip

    def run(self) -> None:
        self.start_operator()
        stopping = self.session.status == STATUS.STOPPING
        reason = stop_reason(self.progress, self.config.budgets, stopping=stopping)
        if reason:
            self.finish_operator(reason)
            return
        stage = "optimization" if self.progress.first_correct else "correctness"
        rounds_left = self.config.budgets.rounds - self.n
        self.append("iteration_started", {"operator": self.entry.slug, "iteration": self.n,
                                          "stage": stage, "rounds_left": rounds_left})  # fmt: skip
        proposed = self.proposal()
        if proposed is None:
            return
        candidate, adopted, retrieved = proposed
        settings = eval_settings(candidate, self.config.measurement, target=self.config.target,
                                 parent=self.progress.parent)  # fmt: skip
        evaluation = carried_out(self.evaluate(self.version, candidate, settings, self.session))
        record_verdict(evaluation, session_id=self.session.pk, position=self.position,
                       operator=self.entry.slug, iteration=self.n)  # fmt: skip
        case = self.record(candidate, evaluation, adopted, retrieved)
        self.after_record(case)

    def start_operator(self) -> None:
        self.append("operator_started", {"operator": self.entry.slug,
                    "version_id": self.version.pk, "position": self.position,
                    "start": "uploaded" if self.entry.start_source_sha256 else "starting kernel"},
                    step=f"{self.position}:start")  # fmt: skip
        self.score_correctness_if_missed()

    # --- proposing ---

    def proposal(self) -> Proposed | None:
        """The candidate of this iteration (the one already proposed, when replaying), the
        items adopted for it and the items that were in context; None when the operator
        stopped instead."""
        done = step_done(self.session.pk, self.step("candidate_proposed"))
        if done is not None:
            return candidate_of(done), done.payload["adopted"], done.payload["retrieved"]
        if self.n == 0:
            start = starting_candidate(self.entry, self.version, self.config.target)
            if start is not None:
                self.propose_event(start, Proposal(start, rationale="the starting kernel"), [])
                return start, [], []
            if self.config.policy != "claude":
                self.finish_operator(
                    f"{self.entry.slug} has no starting kernel for {self.config.target} and "
                    "none was uploaded; the offline policy only transforms an existing kernel: "
                    "upload one, or use the Claude policy, which writes one"
                )
                return None
        situation = self.situation()
        proposal = self.policy_for(self.session, self.config).propose(situation, LoopTools(self))
        if proposal.paused_reason:
            raise SessionPaused(proposal.paused_reason)
        if proposal.candidate is None:
            self.finish_operator(f"the policy stopped: {proposal.rationale}")
            return None
        candidate = bounded_candidate(proposal.candidate)
        retrieved, adopted = offered_and_adopted(situation, proposal)
        self.propose_event(candidate, Proposal(candidate, adopted, proposal.rationale), retrieved)
        return candidate, adopted, retrieved

    def situation(self) -> Situation:
        """What memory recalls, assembled into the context the policy proposes from."""
        config, incumbent, cases = self.config, self.progress.incumbent, self.progress.cases
        recalled = recall(team=self.session.team, session_id=self.session.pk,
                          version=self.version, target=config.target, incumbent=incumbent,
                          mode=self.mode,
                          other_families_only=config.memory_scope == "other-families")  # fmt: skip
        assembled = assemble_context(
            session_id=self.session.pk, team_id=self.session.team_id, target=config.target,
            operator=brief_of(self.version), iteration=self.n,
            rounds_left=config.budgets.rounds - self.n, tried=[tried_of(c) for c in cases],
            incumbent=attempt_of(incumbent) if incumbent else None,
            latest=attempt_of(cases[-1]) if cases else None,
            evaluated=kernels_evaluated(self.session.pk, self.entry.slug, self.n),
            recalled=recalled, budget_tokens=config.budgets.context_tokens, seed=config.seed,
        )  # fmt: skip
        self.append("context_assembled", assembled.record)
        return assembled.situation

    def propose_event(self, candidate: Candidate, proposal: Proposal, retrieved: list[str]) -> None:
        self.append("candidate_proposed", proposal_record(
            candidate, proposal, operator=self.entry.slug, iteration=self.n,
            parent=self.progress.parent, retrieved=retrieved))  # fmt: skip

    # --- recording ---

    def record(self, candidate: Candidate, evaluation: Evaluation,
               adopted: list[dict[str, str]], retrieved: list[str]) -> Case:  # fmt: skip
        return record_case(candidate, evaluation, self.progress, session_id=self.session.pk,
                           position=self.position, operator=self.entry.slug,
                           version_id=self.version.pk, target=self.config.target,
                           adopted=adopted, retrieved=retrieved)  # fmt: skip

    # --- ending stages and operators ---

    def score_correctness_if_missed(self) -> None:
        """A worker that died between recording the first correct case and scoring its stage
        left the stage unscored: score it now, over the same cases."""
        first = self.progress.first_correct
        if first is not None and not self.progress.correctness_scored:
            self.close_stage(correctness_passed(self.progress.cases, first))

    def after_record(self, case: Case) -> None:
        if case.correct and self.progress.first_correct is None:
            self.close_stage(correctness_passed([*self.progress.cases, case], case))

    def finish_operator(self, reason: str) -> None:
        progress = load_progress(self.session, self.version, self.entry.slug)
        self.close_stage(final_stage(progress.cases, progress.incumbent))
        self.append("operator_finished", operator_summary(self.entry.slug, reason, progress),
                    step=f"{self.position}:finished")  # fmt: skip

    def close_stage(self, stage: Stage) -> None:
        # The policy words the rules consolidation proposes (the Claude one with the model,
        # the offline one by summarizing); asked for only when the stage closes.
        policy = self.policy_for
        close_stage(stage, session_id=self.session.pk, team=self.session.team, mode=self.mode,
                    operator=self.entry.slug, position=self.position,
                    distiller=lambda: policy(self.session, self.config).distiller())  # fmt: skip
