"""The loop in this process (evaluations inline, same sandbox): recording, replay, control,
memory modes. The worker processes, the websocket and the kill test are in test_workers.py."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.agents.policy import Candidate, KernelKey, Proposal, Situation
from apps.core.errors import PermissionDenied
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.memory.models import Case, JournalEvent, MemoryVector, Rule, RuleTransition
from apps.memory.values import summarizer
from apps.operators.models import OperatorVersion, StartingKernel
from apps.runs.candidates import candidate_of_case
from apps.runs.config import Budgets, Measurement
from apps.runs.evaluators import evaluate_here
from apps.runs.event_text import event_summary
from apps.runs.judging import judge
from apps.runs.loop import advance
from apps.runs.models import OptimizationSession
from apps.runs.policies import policy_for
from apps.runs.services import session_create, session_pause, session_resume, session_stop
from tests.factories import MembershipFactory, TeamFactory, stored_builtin

FAST = Measurement(seeds=1, warmup=1, repeats=5)


def launch(team: Team, operators: list[str], *, rounds: int = 3, mode: str = "read_write",
           user: Any = None) -> OptimizationSession:  # fmt: skip
    return session_create(
        team=team,
        user=user,
        operators=operators,
        memory_mode=mode,
        budgets=Budgets(rounds=rounds),
        measurement=FAST,
        start=False,
    )


def run_to_end(session: OptimizationSession, evaluate: Any = evaluate_here) -> OptimizationSession:
    for _ in range(200):
        if not advance(session.pk, evaluate=evaluate, policy_for=policy_for):
            break
    session.refresh_from_db()
    return session


def events(session: OptimizationSession, kind: str | None = None) -> list[JournalEvent]:
    found = JournalEvent.objects.filter(session_id=session.pk).order_by("seq")
    return list(found.filter(kind=kind) if kind else found)


@pytest.fixture
def gemm(db: None) -> OperatorVersion:
    return stored_builtin("gemm")


def test_an_operator_runs_to_its_round_budget_and_keeps_the_fastest_correct_kernel(
    gemm: OperatorVersion,
) -> None:
    session = run_to_end(launch(TeamFactory(), ["gemm"], rounds=3))

    assert session.status == "finished", session.status_reason
    cases = list(Case.objects.filter(session_id=session.pk).order_by("iteration"))
    assert [c.iteration for c in cases] == [0, 1, 2]
    start = cases[0]
    assert start.strategy == "starting kernel" and start.parent_id is None and start.correct
    finished = events(session, "operator_finished")[0].payload
    best = Case.objects.get(pk=finished["best_case_id"])
    assert best.pk != start.pk and best.correct and best.source.text != start.source.text
    assert best.latency_ms < start.latency_ms
    assert finished["speedup_vs_start"] == pytest.approx(start.latency_ms / best.latency_ms)
    assert finished["reason"] == "round budget spent (3 rounds)"
    # the journal is gapless, and every case has the steps that led to it
    assert [e.seq for e in events(session)] == list(range(1, session.last_seq + 1))
    for case in cases:
        proposed = [e for e in events(session, "candidate_proposed")
                    if e.payload["iteration"] == case.iteration]  # fmt: skip
        assert len(proposed) == 1 and proposed[0].seq < case.event.seq
        assert proposed[0].payload["source_sha256"] == case.source.sha256
    kinds = [e.kind for e in events(session)]
    assert kinds[0] == "session_started" and kinds[-1] == "session_finished"
    assert {"context_assembled", "compiled", "case_results", "timed", "stage_scored"} <= set(kinds)
    # every step reads as a line of its own on the session page, none as raw JSON
    assert not [e.kind for e in events(session) if event_summary(e.kind, e.payload)[:1] == "{"]
    # and a candidate's timing says how it ran beside its parent, the figure that judged it
    beside = {e.payload["iteration"]: e.payload["detail"].get("vs_baseline")
              for e in events(session, "timed")}  # fmt: skip
    assert beside[0] is None  # the start has no parent
    for case in cases[1:]:
        if beside[case.iteration] is not None:  # where one process could run both
            assert case.speedup_vs_parent == beside[case.iteration]
    assert any(beside[case.iteration] is not None for case in cases[1:])


def test_a_replayed_iteration_reuses_its_candidate_and_records_one_case(
    gemm: OperatorVersion,
) -> None:
    session = launch(TeamFactory(), ["gemm"], rounds=2)  # the replayed iteration is the last
    assert advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)  # iteration 0

    def dies(*args: Any) -> Any:
        raise SystemExit("the worker died while the device evaluated")

    with pytest.raises(SystemExit):
        advance(session.pk, evaluate=dies, policy_for=policy_for)
    proposed = events(session, "candidate_proposed")[-1]
    assert proposed.payload["iteration"] == 1 and not Case.objects.filter(iteration=1).exists()

    session = run_to_end(session)

    iteration_1 = [e for e in events(session) if e.payload.get("iteration") == 1]
    assert [e.kind for e in iteration_1].count("iteration_started") == 1
    assert [e.kind for e in iteration_1].count("candidate_proposed") == 1
    case = Case.objects.get(session_id=session.pk, iteration=1)
    assert case.source.sha256 == proposed.payload["source_sha256"]
    assert Case.objects.filter(session_id=session.pk).count() == 2


def test_pause_stops_after_the_iteration_and_resume_and_stop_take_effect(
    gemm: OperatorVersion,
) -> None:
    engineer = MembershipFactory(role=Role.ENGINEER)
    session = launch(engineer.team, ["gemm"], rounds=5, user=engineer.user)
    assert advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)

    session_pause(session=session, user=engineer.user)
    seq = OptimizationSession.objects.get(pk=session.pk).last_seq
    assert not advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)
    assert OptimizationSession.objects.get(pk=session.pk).last_seq == seq  # nothing ran

    session_resume(session=session, user=engineer.user)
    assert advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)
    session_stop(session=session, user=engineer.user)
    session = run_to_end(session)

    assert session.status == "finished"
    assert session.status_reason == f"stopped by {engineer.user.username}"
    assert Case.objects.filter(session_id=session.pk).count() == 2
    kinds = [e.kind for e in events(session)]
    assert kinds.index("session_paused") < kinds.index("session_resumed")
    assert kinds[-2:] == ["operator_finished", "session_finished"]
    finished = events(session, "operator_finished")[0].payload
    assert finished["reason"] == f"stopped by {engineer.user.username}"
    assert events(session, "stage_scored")[-1].payload["stage"] == "optimization"


@pytest.mark.parametrize("role", [Role.VIEWER, Role.REVIEWER])
def test_only_engineers_and_admins_launch_and_control_sessions(
    gemm: OperatorVersion, role: Role
) -> None:
    member = MembershipFactory(role=role)
    with pytest.raises(PermissionDenied):
        launch(member.team, ["gemm"], user=member.user)
    session = launch(member.team, ["gemm"])  # by the system, e.g. a schedule
    with pytest.raises(PermissionDenied):
        session_pause(session=session, user=member.user)
    with pytest.raises(PermissionDenied):
        session_stop(session=session, user=member.user)


def memory_rows() -> tuple[int, ...]:
    return (
        MemoryVector.objects.count(),
        Rule.objects.count(),
        RuleTransition.objects.count(),
        round(sum(MemoryVector.objects.values_list("value", flat=True)), 9),
        sum(MemoryVector.objects.values_list("adoptions", flat=True)),
        sum(MemoryVector.objects.values_list("retrievals", flat=True)),
    )


def test_memory_written_for_one_operator_is_read_for_the_next_and_read_only_writes_nothing(
    transactional_db: None, eager_tasks: None
) -> None:
    for slug in ("gemm", "batched_matmul", "matmul_bias_relu"):
        stored_builtin(slug)
    team = TeamFactory()
    # Two rounds each: iteration 1 is where an operator's context is assembled and credited.
    first = run_to_end(launch(team, ["gemm", "batched_matmul"], rounds=2))
    assert first.status == "finished", first.status_reason
    gemm = Case.objects.filter(session_id=first.pk, version__operator__slug="gemm")
    gemm_cases = {f"case:{pk}" for pk in gemm.values_list("pk", flat=True)}
    later = [e for e in events(first, "context_assembled")
             if e.payload["operator"] == "batched_matmul"]  # fmt: skip
    seen = {r["key"] for e in later for r in e.payload["retrieved"]}
    assert gemm_cases & seen, "the second operator's context holds the first one's cases"
    assert events(first, "value_updated"), "a learning session credits what it adopted"

    before = memory_rows()
    reader = run_to_end(launch(team, ["matmul_bias_relu"], rounds=2, mode="read_only"))

    assert reader.status == "finished"
    assert memory_rows() == before
    contexts = events(reader, "context_assembled")
    assert contexts and all(c.payload["retrieved"] for c in contexts)  # it did read
    assert not events(reader, "value_updated")


def test_without_a_starting_kernel_the_offline_policy_says_what_to_do(
    gemm: OperatorVersion,
) -> None:
    StartingKernel.objects.filter(version=gemm).delete()
    session = run_to_end(launch(TeamFactory(), ["gemm"]))

    finished = events(session, "operator_finished")[0].payload
    assert "no starting kernel" in finished["reason"] and "Claude policy" in finished["reason"]
    assert session.status == "finished" and not Case.objects.filter(session_id=session.pk).exists()


def test_a_broken_transformation_is_recorded_as_a_failed_branch(gemm: OperatorVersion) -> None:
    """Legality is the evaluator's call: a candidate that breaks correctness is a case in the
    forest with its outcome, and the incumbent stays."""
    session = launch(TeamFactory(), ["gemm"], rounds=2)
    assert advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)

    def breaks_it(version: Any, candidate: Candidate, options: EvalSettings, s: Any) -> Any:
        body, last_return, rest = candidate.source.rpartition("return 0;")
        wrong = f"{body}((float *)outputs[0].data)[0] += 1.0f;\n    {last_return}{rest}"
        return evaluate_here(version, Candidate(wrong, candidate.strategy, candidate.flags,
                                                candidate.threads), options, s)  # fmt: skip

    advance(session.pk, evaluate=breaks_it, policy_for=policy_for)
    session = run_to_end(session)

    failed = Case.objects.get(session_id=session.pk, iteration=1)
    assert failed.outcome == "incorrect" and not failed.correct
    assert failed.parent.iteration == 0
    assert "correct: no" in failed.feedback["summary"]
    finished = events(session, "operator_finished")[0].payload
    assert finished["best_case_id"] == failed.parent_id


def failed_evaluation(version: Any, candidate: Candidate, options: EvalSettings,
                      session: Any) -> Any:  # fmt: skip
    """What a device worker leaves when the evaluation could not be carried out."""
    from apps.devices.services import evaluation_fail, evaluation_request

    evaluation, _ = evaluation_request(version=version, source_text=candidate.source,
                                       options=options, team=session.team)  # fmt: skip
    return evaluation_fail(evaluation, "the reference of gemm v1 failed: out of memory")


def test_an_evaluation_that_could_not_run_pauses_and_resuming_runs_it_again(
    gemm: OperatorVersion,
) -> None:
    session = launch(TeamFactory(), ["gemm"], rounds=1)

    assert not advance(session.pk, evaluate=failed_evaluation, policy_for=policy_for)

    session.refresh_from_db()
    assert session.status == "paused" and "could not be carried out" in session.status_reason
    assert not Case.objects.filter(session_id=session.pk).exists()  # no verdict on the candidate
    session_resume(session=session, user=None)
    session = run_to_end(session)
    assert session.status == "finished"
    assert Case.objects.get(session_id=session.pk, iteration=0).correct


def test_a_stop_pressed_during_an_iteration_is_not_lost_to_a_pause(gemm: OperatorVersion) -> None:
    session = launch(TeamFactory(), ["gemm"], rounds=2)

    def stopped_meanwhile(*args: Any) -> Any:
        session_stop(session=session, user=None)
        return failed_evaluation(*args)

    advance(session.pk, evaluate=stopped_meanwhile, policy_for=policy_for)

    session.refresh_from_db()
    assert session.status == "finished" and session.status_reason.startswith("stopped by system")


def test_a_stop_pressed_during_an_iteration_that_then_pauses_still_scores_the_operator(
    gemm: OperatorVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause used to finish the session at once: no operator_finished, no optimization
    stage scored or credited. Here the worker also dies after scoring the stage, and the one
    that takes over records each step once."""
    from apps.runs.loop import Iteration

    session = launch(TeamFactory(), ["gemm"], rounds=5)
    assert advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)  # iteration 0

    def stopped_meanwhile(*args: Any) -> Any:
        session_stop(session=session, user=None)
        return failed_evaluation(*args)

    append = Iteration.append

    def dies_finishing(self: Iteration, kind: str, *args: Any, **kwargs: Any) -> Any:
        if kind == "operator_finished":
            sys.exit("killed")
        return append(self, kind, *args, **kwargs)

    with monkeypatch.context() as dies:
        dies.setattr(Iteration, "append", dies_finishing)
        with pytest.raises(SystemExit):
            advance(session.pk, evaluate=stopped_meanwhile, policy_for=policy_for)
    assert [e.payload["stage"] for e in events(session, "stage_scored")][-1] == "optimization"
    session = run_to_end(session)

    assert session.status == "finished"
    assert session.status_reason.startswith("stopped by system")
    kinds = [e.kind for e in events(session)]
    assert kinds[-2:] == ["operator_finished", "session_finished"]
    assert kinds.count("operator_finished") == kinds.count("session_finished") == 1
    assert [e.payload["stage"] for e in events(session, "stage_scored")] == [
        "correctness", "optimization"
    ]  # fmt: skip
    assert events(session, "operator_finished")[0].payload["reason"] == "stopped by system"


def test_an_unexpected_error_in_a_session_being_stopped_still_scores_the_operator(
    gemm: OperatorVersion,
) -> None:
    from apps.runs.tasks import pause_after_error

    session = launch(TeamFactory(), ["gemm"], rounds=5)
    assert advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)
    session_stop(session=session, user=None)

    pause_after_error(session.pk, ValueError("the policy tripped"))
    pause_after_error(session.pk, ValueError("the policy tripped"))  # told twice: no change

    session.refresh_from_db()
    assert session.status == "finished"
    assert session.status_reason == (
        "stopped by system (the loop stopped on an error: ValueError: the policy tripped)"
    )
    assert [e.payload["stage"] for e in events(session, "stage_scored")] == [
        "correctness", "optimization"
    ]  # fmt: skip
    assert [e.kind for e in events(session)][-2:] == ["operator_finished", "session_finished"]


def test_a_correctness_stage_left_unscored_by_a_dead_worker_is_scored_once(
    gemm: OperatorVersion, monkeypatch: pytest.MonkeyPatch
) -> None:
    from apps.runs.loop import Iteration

    session = launch(TeamFactory(), ["gemm"], rounds=1)
    with monkeypatch.context() as dies:
        dies.setattr(Iteration, "after_record", lambda self, case: sys.exit("killed"))
        with pytest.raises(SystemExit):
            advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)
    assert Case.objects.filter(session_id=session.pk, correct=True).exists()
    assert not events(session, "stage_scored")

    session = run_to_end(session)

    scored = [e.payload["stage"] for e in events(session, "stage_scored")]
    assert scored.count("correctness") == 1


def test_an_unexpected_error_pauses_the_session_with_it(gemm: OperatorVersion) -> None:
    from apps.runs.tasks import pause_after_error

    session = launch(TeamFactory(), ["gemm"])
    OptimizationSession.objects.filter(pk=session.pk).update(status="running")

    pause_after_error(session.pk, ValueError("the policy tripped"))

    session.refresh_from_db()
    assert session.status == "paused"
    assert session.status_reason == "the loop stopped on an error: ValueError: the policy tripped"


def test_a_retried_advance_whose_ticket_moved_on_queues_the_next_iteration_again(
    gemm: OperatorVersion, django_capture_on_commit_callbacks: Any
) -> None:
    """The database can commit an enqueue's new ticket and go away before answering: the task
    is retried with its old ticket and the message for the new one was never sent."""
    from apps.runs.tasks import advance_session

    session = launch(TeamFactory(), ["gemm"])
    old_ticket = session.ticket
    OptimizationSession.objects.filter(pk=session.pk).update(status="running",
                                                             ticket=old_ticket + 1)  # fmt: skip

    with django_capture_on_commit_callbacks() as first_attempt:
        advance_session.apply(args=(session.pk, old_ticket))
    with django_capture_on_commit_callbacks() as retry:
        advance_session.apply(args=(session.pk, old_ticket), retries=1)

    assert first_attempt == [], "a stale message on its first attempt queues nothing"
    assert len(retry) == 1
    session.refresh_from_db()
    assert session.ticket == old_ticket + 2


def test_a_starting_agent_worker_queues_a_session_the_broker_refused_not_one_run_here(
    gemm: OperatorVersion, monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    """A launch whose message the broker refused stays queued with its ticket; a session made
    with start=False (a benchmark's, run in its own process) was never queued: ticket 0."""
    from kombu.exceptions import OperationalError as BrokerDown

    from apps.runs.tasks import advance_session, resume_orphaned

    def broker_down(*args: object) -> None:
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    run_here = launch(TeamFactory(), ["gemm"])
    running_here = launch(TeamFactory(), ["gemm"])
    OptimizationSession.objects.filter(pk=running_here.pk).update(status="running")
    with monkeypatch.context() as down, django_capture_on_commit_callbacks(execute=True):
        down.setattr(advance_session, "delay", broker_down)
        refused = session_create(team=TeamFactory(), user=None, operators=["gemm"])
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(advance_session, "delay", lambda *args: sent.append(args))

    with django_capture_on_commit_callbacks(execute=True):
        assert resume_orphaned() == 1

    assert sent == [(refused.pk, 1)]  # its own ticket: one waiting in a backlog keeps its place
    assert OptimizationSession.objects.get(pk=refused.pk).ticket == 1
    statuses = OptimizationSession.objects.filter(pk__in=[run_here.pk, running_here.pk])
    assert sorted(statuses.values_list("status", "ticket")) == [("queued", 0), ("running", 0)]


class Commenting:
    """A policy that proposes its incumbent with a comment added, at the given threads."""

    name = "offline"

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def propose(self, situation: Situation, tools: Any) -> Proposal:
        assert situation.incumbent is not None
        source = f"{situation.incumbent.candidate.source}\n/* gcc ignores this */\n"
        return Proposal(Candidate(source, "comment", threads=self.threads))

    def distiller(self) -> Any:
        return summarizer


@pytest.mark.parametrize("threads", [1, 2])
def test_a_change_gcc_compiles_away_is_no_change_however_it_timed(db: None, threads: int) -> None:
    """A comment compiles to the parent's very binary: with the same threads a lucky timing is
    noise (no_change, 1.0x, the incumbent stays); with other threads it is another kernel, and
    the parent timed beside it (serial, so its thread count changes nothing) judges it."""
    stored_builtin("vector_add")
    session = launch(TeamFactory(), ["vector_add"], rounds=2, mode="off")
    assert advance(session.pk, evaluate=evaluate_here, policy_for=policy_for)  # the start
    start = Case.objects.get(session_id=session.pk, iteration=0)
    assert candidate_of_case(start).threads == 1

    def timed_lucky(version: Any, candidate: Candidate, options: EvalSettings, s: Any) -> Any:
        evaluation = evaluate_here(version, candidate, options, s)
        evaluation.verdict["timed"]["candidate"]["median_ms"] = start.latency_ms / 2
        evaluation.save(update_fields=["verdict"])
        return evaluation

    advance(session.pk, evaluate=timed_lucky, policy_for=lambda *_: Commenting(threads))

    case = Case.objects.get(session_id=session.pk, iteration=1)
    assert case.correct and case.latency_ms == pytest.approx(start.latency_ms / 2)
    evaluation = Evaluation.objects.get(pk=case.feedback["evaluation_id"])
    assert evaluation.options["baseline_sha256"] == start.source.sha256
    replaced = [e.payload["case_id"] for e in events(session, "incumbent_replaced")]
    if threads == 1:
        assert case.outcome == "no_change" and case.speedup_vs_parent == 1.0
        assert case.feedback["same_binary"] and "very shared object" in case.feedback["summary"]
        assert replaced == [start.pk]
    else:
        assert "same_binary" not in case.feedback
        assert case.speedup_vs_parent == evaluation.verdict["timed"]["vs_baseline"]
        assert case.speedup_vs_parent < 1.5  # the lucky 2x was never the comparison


def test_a_parent_timed_beside_the_candidate_decides_over_its_own_older_timing() -> None:
    def stats(median_ms: float) -> dict[str, float]:
        return {"median_ms": median_ms, "mean_ms": median_ms, "min_ms": median_ms, "samples": 5}

    timed = {"ok": True, "case_id": "timing", "repeats": 5, "threads": 1,
             "candidate": stats(10.0), "reference": stats(20.0), "baseline": stats(15.0),
             "speedup": 2.0, "vs_baseline": 1.5}  # fmt: skip
    environment = {"compiler": "gcc", "cpu_model": "x86-64", "threads": 1, "flags": []}
    evaluation = Evaluation(status="done", verdict={"status": "correct", "timed": timed,
                                                    "environment": environment})  # fmt: skip

    judged = judge(evaluation, parent_latency_ms=5.0)  # alone, the parent looked twice as fast

    assert (judged.outcome, judged.speedup_vs_parent) == ("improved", 1.5)
    assert "speedup vs the baseline, timed beside it: 1.50x" in judged.feedback["summary"]


class Remembering(Commenting):
    """Commenting, keeping what each situation said this operator had already run."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.evaluated: list[frozenset[KernelKey]] = []

    def propose(self, situation: Situation, tools: Any) -> Proposal:
        self.evaluated.append(situation.evaluated)
        return super().propose(situation, tools)


def test_a_policy_is_told_every_kernel_its_operator_already_ran(gemm: OperatorVersion) -> None:
    session = launch(TeamFactory(), ["gemm"], rounds=3, mode="off")
    policy = Remembering(threads=2)
    for _ in range(3):
        advance(session.pk, evaluate=evaluate_here, policy_for=lambda *_: policy)

    ran = [candidate_of_case(c).kernel_key
           for c in Case.objects.filter(session_id=session.pk).order_by("iteration")]  # fmt: skip
    assert ran[1] != ran[0] and ran[1][2] == 2  # a comment and threads: another kernel
    assert policy.evaluated == [frozenset(ran[:1]), frozenset(ran[:2])]
