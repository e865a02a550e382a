"""SAGE's loop closed by real sessions: a suite run with the offline policy leaves rule
candidates with their evidence in the review queue, and a rule a reviewer approves is in the
hot tier of the next session's recorded context."""

from __future__ import annotations

from apps.accounts.roles import Role
from apps.memory.models import JournalEvent, MemoryVector, Rule
from apps.memory.rules import rule_approve
from apps.runs.config import Budgets, Measurement
from apps.runs.evaluators import evaluate_here
from apps.runs.loop import advance
from apps.runs.models import OptimizationSession
from apps.runs.policies import policy_for
from apps.runs.services import session_create
from tests.factories import MembershipFactory, stored_builtin

# Row-wise operators where the same lesson (let gcc vectorize the math with -ffast-math) pays
# on each: the first one learns it, the next ones adopt it.
SUITE = ["softmax_rows", "scaled_softmax", "logsumexp_rows", "layernorm"]
# The next session only has to assemble a context once: any operator will do, a cheap one.
NEXT = "gelu"
FAST = Measurement(seeds=1, warmup=1, repeats=5)


def run(session: OptimizationSession) -> OptimizationSession:
    while advance(session.pk, evaluate=evaluate_here, policy_for=policy_for):
        pass
    session.refresh_from_db()
    assert session.status == "finished", session.status_reason
    return session


def test_a_suite_run_proposes_rules_and_an_approved_one_enters_the_next_sessions_hot_tier(
    transactional_db: None, eager_tasks: None
) -> None:
    for slug in [*SUITE, NEXT]:
        stored_builtin(slug)
    reviewer = MembershipFactory(role=Role.REVIEWER)
    team = reviewer.team

    suite_run = run(session_create(team=team, user=None, operators=SUITE, measurement=FAST,
                                   budgets=Budgets(rounds=2), start=False))  # fmt: skip

    queue = list(Rule.objects.filter(team=team, status=Rule.Status.PENDING))
    assert queue, "the suite run put at least one rule candidate up for review"
    rule = queue[0]
    version = rule.versions.get()
    source = MemoryVector.objects.get(key=rule.source_key)
    assert version.evidence["source"] == rule.source_key
    assert len(version.evidence["operators"]) >= 3 and source.adoptions >= 3 and source.value > 0
    assert version.evidence["measured"]["speedup_vs_parent"] > 1
    proposed = JournalEvent.objects.filter(session_id=suite_run.pk, kind="rule_proposed")
    assert rule.pk in {e.payload["rule_id"] for e in proposed}

    rule_approve(rule=rule, user=reviewer.user, version_number=version.number)
    next_session = run(session_create(team=team, user=None, operators=[NEXT],
                                      measurement=FAST, budgets=Budgets(rounds=2),
                                      start=False))  # fmt: skip

    context = JournalEvent.objects.get(session_id=next_session.pk, kind="context_assembled")
    assert f"rule:{rule.pk}" in context.payload["hot_rules"]
    assert f"rule:{rule.pk}" in context.payload["admitted"]
    assert context.payload["tokens_per_tier"]["hot"] > version.tokens
