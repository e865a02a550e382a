"""The orchestrator: KOPE's loop, one iteration per call of `advance`.

Where a session stands is read from its journal and cases every time, never kept in memory,
so any agent worker can take the next iteration and a worker that died mid-way is replaced
by one that replays the same iteration. Each step is appended under an idempotency key
(`<operator position>:<iteration>:<kind>`): a replayed step finds its event and reuses it (the
candidate already proposed, the evaluation already requested) instead of writing a second
one, and a case is recorded once per iteration by a unique constraint.

Per operator: iteration 0 evaluates the starting kernel; later iterations retrieve, assemble
the context, ask the policy, evaluate and record, replacing the incumbent only when a correct
candidate is faster by more than IMPROVEMENT_MARGIN. The correctness stage ends at the first
correct kernel, the optimization stage when the operator stops (round or token budget,
plateau, the policy has nothing left, a person's stop); each scored stage credits the items
its iterations adopted (ATU) and lets consolidation propose rules (UGC).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.agents.coldstart import cold_start_documents
from apps.agents.context import ContextItem, PackedContext, Tier, pack
from apps.agents.policy import (
    FAILED_OUTCOMES,
    Attempt,
    Candidate,
    KernelKey,
    OperatorBrief,
    Policy,
    Proposal,
    Situation,
    bounded_candidate,
    candidate_of,
    candidate_of_case,
)
from apps.core.locks import advisory_lock
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation, KernelSource
from apps.devices.services import kernel_source_store
from apps.devices.targets import target_get
from apps.memory.journal import journal_append, journal_record, step_done
from apps.memory.keys import case_key, id_in_key, rule_key
from apps.memory.learning import correctness_stage_score, optimization_stage_score
from apps.memory.models import Case, JournalEvent
from apps.memory.retrieval import Hit, Query, retrieve
from apps.memory.rules import hot_memory
from apps.memory.values import (
    Distiller,
    MemoryMode,
    consolidate,
    record_hot_memory_use,
    stage_credit,
)
from apps.operators.models import OperatorVersion
from apps.operators.spec import spec_from_json
from apps.runs.config import OperatorEntry, SessionConfig
from apps.runs.judging import judge, ran_as_parent
from apps.runs.models import OptimizationSession
from apps.runs.tools import LoopTools

logger = logging.getLogger(__name__)

RETRIEVAL_LIMIT = 12
LOCK_NAMESPACE = 7_001  # pg_advisory_lock(namespace, session id): one advancer per session
STATUS = OptimizationSession.Status

Evaluate = Callable[[OperatorVersion, Candidate, EvalSettings, OptimizationSession], Evaluation]
PolicyFactory = Callable[[OptimizationSession, SessionConfig], Policy]


class SessionPaused(Exception):
    """The iteration cannot go on now (the model's API gave up, no device worker answered)."""


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
    OptimizationSession.objects.filter(pk=session.pk, status=STATUS.QUEUED).update(
        status=STATUS.RUNNING
    )
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


def operator_started(
    session: OptimizationSession, config: SessionConfig, entry: OperatorEntry
) -> bool:
    position = [e.slug for e in config.operators].index(entry.slug)
    return step_done(session.pk, f"{position}:start") is not None


def current_operator(session: OptimizationSession, config: SessionConfig) -> OperatorEntry | None:
    finished = set(
        JournalEvent.objects.filter(session_id=session.pk, kind="operator_finished").values_list(
            "payload__operator", flat=True
        )
    )
    return next((e for e in config.operators if e.slug not in finished), None)


# --- one iteration -----------------------------------------------------------------------------


@dataclass
class Progress:
    """Where one operator stands, read from the session's cases and journal."""

    cases: list[Case]
    incumbent: Case | None
    correctness_scored: bool
    tokens_used: int

    @property
    def iteration(self) -> int:
        return len(self.cases)

    @property
    def first_correct(self) -> Case | None:
        return next((c for c in self.cases if c.correct), None)


class Iteration:
    def __init__(
        self,
        session: OptimizationSession,
        config: SessionConfig,
        entry: OperatorEntry,
        evaluate: Evaluate,
        policy_for: PolicyFactory,
    ) -> None:
        self.session, self.config, self.entry = session, config, entry
        self.evaluate, self.policy_for = evaluate, policy_for
        self.position = [e.slug for e in config.operators].index(entry.slug)
        self.version = OperatorVersion.objects.select_related("operator").get(pk=entry.version_id)
        self.mode = MemoryMode(config.memory_mode)
        self.progress = load_progress(session, self.version, entry.slug)
        self.n = self.progress.iteration

    def step(self, kind: str) -> str:
        return f"{self.position}:{self.n}:{kind}"

    def append(self, kind: str, payload: dict[str, Any], step: str | None = None) -> JournalEvent:
        return self.record_step(kind, payload, step)[0]

    def record_step(
        self, kind: str, payload: dict[str, Any], step: str | None = None
    ) -> tuple[JournalEvent, bool]:
        return journal_record(session_id=self.session.pk, kind=kind, payload=payload,
                              step=self.step(kind) if step is None else step)  # fmt: skip

    def run(self) -> None:
        self.append("operator_started", {"operator": self.entry.slug,
                    "version_id": self.version.pk, "position": self.position,
                    "start": "uploaded" if self.entry.start_source_sha256 else "starting kernel"},
                    step=f"{self.position}:start")  # fmt: skip
        self.score_correctness_if_missed()
        reason = self.stop_reason()
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
        evaluation = self.evaluate(self.version, candidate, self.eval_settings(candidate),
                                   self.session)  # fmt: skip
        if evaluation.status == Evaluation.Status.FAILED:
            # Not the candidate's fault (a reference that failed, workers that died): pause;
            # resuming replays this iteration and asks for the evaluation again.
            raise SessionPaused(f"evaluation {evaluation.pk} could not be carried out: "
                                f"{evaluation.error}")  # fmt: skip
        self.report_verdict(evaluation)
        case = self.record(candidate, evaluation, adopted, retrieved)
        self.after_record(case)

    # --- stopping ---

    def stop_reason(self) -> str:
        budgets, progress = self.config.budgets, self.progress
        if self.session.status == STATUS.STOPPING:
            return "stopped by request"
        if self.n >= budgets.rounds:
            return f"round budget spent ({budgets.rounds} rounds)"
        if progress.tokens_used >= budgets.tokens:
            return f"token budget spent ({progress.tokens_used} of {budgets.tokens} tokens)"
        incumbent = progress.incumbent
        if incumbent is not None and self.n - incumbent.iteration - 1 >= budgets.plateau:
            return f"plateau: no faster correct kernel in the last {budgets.plateau} rounds"
        return ""

    # --- proposing ---

    def proposal(self) -> tuple[Candidate, list[dict[str, str]], list[str]] | None:
        """The candidate of this iteration (the one already proposed, when replaying), the
        items adopted for it and the items that were in context; None when the operator
        stopped instead."""
        done = step_done(self.session.pk, self.step("candidate_proposed"))
        if done is not None:
            return candidate_of(done), done.payload["adopted"], done.payload["retrieved"]
        if self.n == 0:
            candidate = self.starting_candidate()
            if candidate is not None:
                self.propose_event(
                    candidate, Proposal(candidate, rationale="the starting kernel"), []
                )
                return candidate, [], []
            if self.config.policy != "claude":
                self.finish_operator(
                    f"{self.entry.slug} has no starting kernel for {self.config.target} and "
                    "none was uploaded; the offline policy only transforms an existing kernel: "
                    "upload one, or use the Claude policy, which writes one"
                )
                return None
        situation = self.situation()
        tools = LoopTools(self)
        proposal = self.policy_for(self.session, self.config).propose(situation, tools)
        if proposal.paused_reason:
            raise SessionPaused(proposal.paused_reason)
        if proposal.candidate is None:
            self.finish_operator(f"the policy stopped: {proposal.rationale}")
            return None
        candidate = bounded_candidate(proposal.candidate)
        retrieved = [h.key for h in situation.retrieved] + [r["key"] for r in situation.hot_rules]
        retrieved += [key for key in proposal.retrieved if key not in set(retrieved)]
        adopted = [a for a in proposal.adopted if a.get("key") in set(retrieved)]
        self.propose_event(candidate, Proposal(candidate, adopted, proposal.rationale), retrieved)
        return candidate, adopted, retrieved

    def starting_candidate(self) -> Candidate | None:
        if self.entry.start_source_sha256:
            source = KernelSource.objects.get(sha256=self.entry.start_source_sha256)
            return Candidate(source.text, "uploaded starting kernel")
        start = self.version.starting_kernels.filter(target=self.config.target).first()
        return Candidate(start.source, "starting kernel") if start else None

    def propose_event(self, candidate: Candidate, proposal: Proposal, retrieved: list[str]) -> None:
        source = kernel_source_store(candidate.source)
        parent = self.parent_case()
        self.append("candidate_proposed", {
            "operator": self.entry.slug, "iteration": self.n, "strategy": candidate.strategy,
            "source_sha256": source.sha256, "parent_case_id": parent.pk if parent else None,
            "flags": list(candidate.flags), "threads": candidate.threads,
            "adopted": proposal.adopted, "retrieved": retrieved,
            "rationale": proposal.rationale[:2000],
        })  # fmt: skip

    def parent_case(self) -> Case | None:
        """What a candidate modifies: the incumbent, or while repairing, the latest attempt."""
        if self.progress.incumbent is not None:
            return self.progress.incumbent
        return self.progress.cases[-1] if self.progress.cases else None

    def situation(self) -> Situation:
        hits, rules = self.memory()
        incumbent = attempt_of(self.progress.incumbent) if self.progress.incumbent else None
        latest = attempt_of(self.progress.cases[-1]) if self.progress.cases else None
        packed = self.context(hits, rules, incumbent, latest)
        in_context = set(packed.keys_in("admitted")) | set(packed.keys_in("shortened"))
        hits = [h for h in hits if h.key in in_context]
        rules = [r for r in rules if r["key"] in in_context]
        self.append("context_assembled", {
            "operator": self.entry.slug, "iteration": self.n, "tokens": packed.tokens,
            "budget": packed.budget, "tokens_per_tier": packed.tokens_per_tier(),
            "admitted": packed.keys_in("admitted"), "shortened": packed.keys_in("shortened"),
            "cut": packed.keys_in("cut"),
            "retrieved": [{"key": h.key, "kind": h.kind, "operator": h.provenance["operator"],
                           "similarity": round(h.scores["similarity"], 4),
                           "value": h.scores["value"]} for h in hits],
            "hot_rules": [r["key"] for r in rules],
        })  # fmt: skip
        tried = frozenset(
            c.strategy for c in self.progress.cases
            if incumbent is not None and c.parent_id == incumbent.case_id
        )  # fmt: skip
        broke = frozenset(c.strategy for c in self.progress.cases
                          if c.outcome in FAILED_OUTCOMES)  # fmt: skip
        lost = lost_on_same_source(self.progress)
        return Situation(
            session_id=self.session.pk, team_id=self.session.team_id, target=self.config.target,
            operator=brief_of(self.version), iteration=self.n,
            stage="optimization" if incumbent else "correctness",
            rounds_left=self.config.budgets.rounds - self.n, incumbent=incumbent, latest=latest,
            tried=tried, context=packed, retrieved=hits, hot_rules=rules, seed=self.config.seed,
            broke=broke, lost=lost, evaluated=self.kernels_evaluated(),
        )  # fmt: skip

    def kernels_evaluated(self) -> frozenset[KernelKey]:
        """The kernels proposed for this operator before this iteration, as they ran."""
        proposed = JournalEvent.objects.filter(
            session_id=self.session.pk, kind="candidate_proposed",
            payload__operator=self.entry.slug, payload__iteration__lt=self.n,
        ).values_list("payload", flat=True)  # fmt: skip
        return frozenset((p["source_sha256"], tuple(p["flags"]), p["threads"]) for p in proposed)

    def memory(self) -> tuple[list[Hit], list[dict[str, Any]]]:
        if self.mode == MemoryMode.OFF:
            return [], []
        rules = [
            {"key": rule_key(v.rule_id), "statement": v.statement, "applies_when": v.applies_when,
             "not_when": v.not_when, "text": f"{v.statement}\nApplies when: {v.applies_when}"}
            for v in hot_memory(self.session.team)
        ]  # fmt: skip
        resident = {r["key"] for r in rules}
        query = Query(text=query_text(self.version, self.progress), team_id=self.session.team_id,
                      target=self.config.target, kinds=("case", "rule"),
                      limit=RETRIEVAL_LIMIT, first=self.measured_from_incumbent())  # fmt: skip
        # No family filter: the family is in the query text, and a lesson from another family
        # (a loop order, a thread count) often carries over.
        hits = [h for h in retrieve(query) if h.key not in resident]
        return hits, rules

    def measured_from_incumbent(self) -> tuple[str, ...]:
        """The keys of the cases earlier sessions of this team made from the incumbent's very
        kernel (source, flags, threads) on this operator version and target, newest first:
        whatever its similarity, the evaluator's verdict on a next step from here."""
        incumbent = self.progress.incumbent
        if incumbent is None or incumbent.source_id is None:
            return ()
        kernel = candidate_of_case(incumbent).kernel_key
        children = (
            Case.objects.filter(session__team_id=self.session.team_id, version=self.version,
                                target=self.config.target,
                                parent__source_id=incumbent.source_id)
            .exclude(session_id=self.session.pk)
            .select_related("parent__source", "parent__version__operator")
            .order_by("-pk")
        )  # fmt: skip
        from_kernel: dict[int, bool] = {}
        keys = []
        for child in children:
            parent = child.parent
            assert parent is not None
            if parent.pk not in from_kernel:
                from_kernel[parent.pk] = candidate_of_case(parent).kernel_key == kernel
            if from_kernel[parent.pk]:
                keys.append(case_key(child.pk))
        return tuple(keys)

    def context(self, hits: list[Hit], rules: list[dict[str, Any]], incumbent: Attempt | None,
                latest: Attempt | None) -> PackedContext:  # fmt: skip
        items = [ContextItem("task", Tier.HOT, task_text(self.version, self.config),
                             required=True)]  # fmt: skip
        if incumbent is not None:
            items.append(ContextItem("incumbent", Tier.HOT, kernel_text(incumbent),
                                     short_text=incumbent.candidate.strategy, required=True,
                                     priority=2))  # fmt: skip
        if latest is not None and (incumbent is None or latest.case_id != incumbent.case_id):
            items.append(ContextItem("latest-verdict", Tier.HOT, latest.verdict_summary,
                                     short_text=latest.verdict_summary[:400], required=True,
                                     priority=1))  # fmt: skip
        items += [ContextItem(r["key"], Tier.HOT, r["text"], priority=0) for r in rules]
        items += [
            ContextItem(h.key, Tier.WARM, h.text, priority=RETRIEVAL_LIMIT - position)
            for position, h in enumerate(hits)
        ]
        items += cold_start_documents(self.config.target)
        return pack(items, self.config.budgets.context_tokens)

    # --- evaluating and recording ---

    def eval_settings(self, candidate: Candidate) -> EvalSettings:
        m = self.config.measurement
        return EvalSettings(
            seeds=m.seeds,
            warmup=m.warmup,
            repeats=m.repeats,
            threads=candidate.threads,
            extra_flags=tuple(candidate.flags),
            **self.baseline_for(candidate),
        )

    def baseline_for(self, candidate: Candidate) -> dict[str, Any]:
        """The parent, timed beside the candidate, when it is a correct, timed kernel that runs
        as it ran at the candidate's threads (one process runs both): timings taken minutes
        apart differ by more than many real gains on a shared host, side by side they do not."""
        parent = self.parent_case()
        if not target_get(self.config.target).times_baseline or not timed_kernel(parent):
            return {}
        assert parent is not None
        return baseline_settings(candidate, parent, candidate_of_case(parent))

    def report_verdict(self, evaluation: Evaluation) -> None:
        verdict = evaluation.verdict or {}
        base = {"operator": self.entry.slug, "iteration": self.n, "evaluation_id": evaluation.pk}
        compiled = verdict.get("compiled")
        if compiled is not None:
            errors = compiled.get("errors", [])[:5]
            self.append("compiled", {**base, "ok": bool(compiled["ok"]),
                                     "detail": {"cached": compiled.get("cached", False),
                                                "errors": errors}})  # fmt: skip
        correct = verdict.get("correct")
        if correct is not None:
            failing = [c for c in correct.get("cases", []) if not c.get("passed")][:10]
            self.append("case_results", {**base, "ok": bool(correct["ok"]), "detail": {
                "runs": correct.get("runs"), "failed": correct.get("failed"),
                "failing": failing}})  # fmt: skip
        timed = verdict.get("timed")
        if timed is not None:
            detail = {k: timed.get(k) for k in ("case_id", "speedup", "reason", "threads")}
            if "vs_baseline" in timed:
                detail["vs_baseline"] = timed["vs_baseline"]
            if "candidate" in timed:
                detail["median_ms"] = timed["candidate"]["median_ms"]
                detail["reference_median_ms"] = timed["reference"]["median_ms"]
            self.append("timed", {**base, "ok": bool(timed.get("ok")), "detail": detail})

    def record(self, candidate: Candidate, evaluation: Evaluation,
               adopted: list[dict[str, str]], retrieved: list[str]) -> Case:  # fmt: skip
        parent = self.parent_case()
        judged = judge(evaluation, parent.latency_ms if parent else None,
                       same_binary=ran_as_parent(evaluation, candidate, parent))  # fmt: skip
        source = kernel_source_store(candidate.source)
        incumbent = self.progress.incumbent
        with transaction.atomic():
            event = self.append("case_recorded", {
                "iteration": self.n, "version_id": self.version.pk, "target": self.config.target,
                "strategy": candidate.strategy, "outcome": judged.outcome,
                "correct": judged.correct, "parent_case_id": parent.pk if parent else None,
                "tags": strategy_tags(candidate), "source_sha256": source.sha256,
                "validation": judged.validation, "latency_ms": judged.latency_ms,
                "speedup_vs_reference": judged.speedup_vs_reference,
                "speedup_vs_parent": judged.speedup_vs_parent, "feedback": judged.feedback,
                "retrieved": retrieved, "adopted": adopted,
            })  # fmt: skip
            case = Case.objects.get(pk=event.pk)
            if replaces_incumbent(case, incumbent):
                self.append("incumbent_replaced", {
                    "operator": self.entry.slug, "iteration": self.n, "case_id": case.pk,
                    "previous_case_id": incumbent.pk if incumbent else None,
                    "latency_ms": case.latency_ms,
                    "previous_latency_ms": incumbent.latency_ms if incumbent else None,
                })  # fmt: skip
            if retrieved:
                self.append("adoption_recorded", {"operator": self.entry.slug,
                            "iteration": self.n, "case_id": case.pk, "retrieved": retrieved,
                            "adopted": adopted})  # fmt: skip
        return case

    def score_correctness_if_missed(self) -> None:
        """A worker that died between recording the first correct case and scoring its stage
        left the stage unscored: score it now, over the same cases."""
        first = self.progress.first_correct
        if first is not None and not self.progress.correctness_scored:
            stage_cases = [c for c in self.progress.cases if c.iteration <= first.iteration]
            self.score_stage("correctness", correctness_stage_score(True), stage_cases)

    def after_record(self, case: Case) -> None:
        first_correct = self.progress.first_correct
        if case.correct and first_correct is None:
            stage_cases = [*self.progress.cases, case]
            self.score_stage("correctness", correctness_stage_score(True), stage_cases)

    # --- ending stages and operators ---

    def distiller(self) -> Distiller:
        """The Claude policy words rules with the model; the offline one summarizes."""
        return self.policy_for(self.session, self.config).distiller()

    def finish_operator(self, reason: str) -> None:
        progress = load_progress(self.session, self.version, self.entry.slug)
        first = progress.first_correct
        if first is None:
            self.score_stage("correctness", correctness_stage_score(False), progress.cases)
        else:
            best = progress.incumbent or first
            score = optimization_stage_score(first.latency_ms or 0.0, best.latency_ms or 0.0)
            later = [c for c in progress.cases if c.iteration > first.iteration]
            self.score_stage("optimization", score, later, first=first, best=best)
        self.append("operator_finished", operator_summary(self.entry.slug, reason, progress),
                    step=f"{self.position}:finished")  # fmt: skip

    def score_stage(self, stage: str, score: float, cases: list[Case], *,
                    first: Case | None = None, best: Case | None = None) -> None:  # fmt: skip
        retrieved = list(dict.fromkeys(k for c in cases for k in c.retrieved))
        adopted = list(dict.fromkeys(a["key"] for c in cases for a in c.adopted))
        step = f"{self.position}:{stage}"
        used_rules = {n for k in adopted if (n := id_in_key(k, "rule")) is not None}
        with transaction.atomic():  # credited once with the stage's score, or not at all
            _, new = self.record_step("stage_scored", {
                "operator": self.entry.slug, "stage": stage, "score": score,
                "retrieved": retrieved, "adopted": adopted,
                "latency_first_ms": first.latency_ms if first else None,
                "latency_best_ms": best.latency_ms if best else None,
            }, step=f"{step}:scored")  # fmt: skip
            if new:
                stage_credit(session_id=self.session.pk, mode=self.mode, stage=stage,
                             operator=self.entry.slug, score=score, retrieved=retrieved,
                             adopted=adopted, step=f"{step}:credit")  # fmt: skip
                record_hot_memory_use(self.session.team, used_rules, mode=self.mode)
        for rule in consolidate(self.session.team, mode=self.mode, distill=self.distiller()):
            version = rule.versions.order_by("-number").first()
            self.append("rule_proposed", {"rule_id": rule.pk, "source_key": rule.source_key,
                                          "statement": version.statement if version else ""},
                        step=f"rule:{rule.pk}")  # fmt: skip


# --- reading progress ----------------------------------------------------------------------------


def load_progress(session: OptimizationSession, version: OperatorVersion, slug: str) -> Progress:
    cases = list(
        Case.objects.filter(session_id=session.pk, version=version)
        .select_related("source", "version__operator")
        .order_by("iteration")
    )
    events = JournalEvent.objects.filter(session_id=session.pk, payload__operator=slug)
    replaced = events.filter(kind="incumbent_replaced").order_by("-seq").first()
    incumbent = next((c for c in cases if replaced and c.pk == replaced.payload["case_id"]), None)
    tokens = sum(
        sum(e.payload["usage"].values()) for e in events.filter(kind="model_called").only("payload")
    )
    scored = events.filter(kind="stage_scored", payload__stage="correctness").exists()
    return Progress(cases, incumbent, scored, tokens)


def attempt_of(case: Case) -> Attempt:
    summary = case.feedback.get("summary", "")
    return Attempt(case.pk, candidate_of_case(case), case.outcome, case.correct,
                   case.latency_ms, summary)  # fmt: skip


def brief_of(version: OperatorVersion) -> OperatorBrief:
    spec = spec_from_json(version.spec)
    return OperatorBrief(
        slug=version.operator.slug,
        name=version.name,
        family=version.operator.family,
        description=version.description,
        version_id=version.pk,
        max_abs=spec.max_abs,
        max_rel=spec.max_rel,
    )


def query_text(version: OperatorVersion, progress: Progress) -> str:
    incumbent = progress.incumbent.strategy if progress.incumbent else "the starting kernel"
    return (f"{version.name} ({version.operator.slug}, {version.operator.family}). "
            f"{version.description.strip()[:300]} Incumbent: {incumbent}.")  # fmt: skip


def task_text(version: OperatorVersion, config: SessionConfig) -> str:
    spec = spec_from_json(version.spec)
    return (f"Optimize {version.name} ({version.operator.slug}, family "
            f"{version.operator.family}) for {config.target}.\n{version.description.strip()}\n"
            f"Tolerance: max_abs {spec.max_abs:g}, max_rel {spec.max_rel:g}.")  # fmt: skip


def kernel_text(attempt: Attempt) -> str:
    c = attempt.candidate
    latency = f"{attempt.latency_ms:.3f} ms" if attempt.latency_ms else "not timed"
    return (f"Incumbent ({c.strategy}; {latency}; threads {c.threads}; flags "
            f"{' '.join(c.flags) or 'none'}):\n```c\n{c.source}\n```")  # fmt: skip


def strategy_tags(candidate: Candidate) -> list[str]:
    tags = [candidate.strategy.split("(", 1)[0].strip()]
    if candidate.threads > 1:
        tags.append(f"threads={candidate.threads}")
    return tags + list(candidate.flags)


def lost_on_same_source(progress: Progress) -> frozenset[str]:
    """The strategies that did not improve a kernel whose source is the incumbent's."""
    incumbent = progress.incumbent
    if incumbent is None:
        return frozenset()
    sources = {case.pk: case.source_id for case in progress.cases}
    return frozenset(
        case.strategy for case in progress.cases
        if case.outcome != "improved" and case.parent_id is not None
        and sources.get(case.parent_id) == incumbent.source_id
    )  # fmt: skip


def baseline_settings(candidate: Candidate, baseline: Case, ran: Candidate) -> dict[str, Any]:
    """The EvalSettings fields that time `baseline`'s kernel (proposed as `ran`) beside
    `candidate` in one process; {} when one process cannot run both as they ran. Without a
    parallel region the thread count changes nothing (the parallel loop's first candidate,
    which brings the cores, is compared with its serial parent)."""
    assert baseline.source is not None
    if ran.threads != candidate.threads and "omp parallel" in baseline.source.text:
        return {}
    return {"baseline_sha256": baseline.source.sha256, "baseline_flags": tuple(ran.flags)}


def timed_kernel(case: Case | None) -> bool:
    return (case is not None and case.correct and case.latency_ms is not None
            and case.source is not None)  # fmt: skip


def replaces_incumbent(case: Case, incumbent: Case | None) -> bool:
    """The first correct, timed kernel; after it, one judged faster than its parent, which is
    the incumbent."""
    if not case.correct or case.latency_ms is None:
        return False
    return incumbent is None or case.outcome == "improved"


def operator_summary(slug: str, reason: str, progress: Progress) -> dict[str, Any]:
    start = progress.cases[0] if progress.cases else None
    best = progress.incumbent
    start_ms = start.latency_ms if start else None
    best_ms = best.latency_ms if best else None
    return {
        "operator": slug, "reason": reason, "rounds_used": progress.iteration,
        "best_case_id": best.pk if best else None, "start_latency_ms": start_ms,
        "best_latency_ms": best_ms,
        "speedup_vs_start": start_ms / best_ms if start_ms and best_ms else None,
        "speedup_vs_reference": best.speedup_vs_reference if best else None,
    }  # fmt: skip
