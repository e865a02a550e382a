"""The token economy of a real session: the offline policy's loop run in this process on a
cheap operator, then its journal read back."""

from __future__ import annotations

import pytest

from apps.accounts.models import Team
from apps.agents.coldstart import cold_start_documents
from apps.benchmarks.evaluator import BenchmarkError
from apps.benchmarks.tokens import context_economy, session_iterations
from apps.core.tokens import count_tokens
from apps.devices.models import KernelSource
from apps.memory.models import JournalEvent
from apps.runs.models import OptimizationSession
from tests.reports.sessions import real_session

ROUNDS = 4  # the starting kernel's round, then three that assemble a context


@pytest.fixture
def finished_session(team: Team) -> OptimizationSession:
    return real_session(team, "gelu", rounds=ROUNDS)


def test_passive_context_grows_with_each_iteration_up_to_the_window_and_outweighs_active(
    finished_session: OptimizationSession,
) -> None:
    # one session for every property: running it is most of the time
    iterations = session_iterations(finished_session.pk, 200_000)
    report = context_economy([finished_session.pk])
    window = iterations[0].passive  # the first iteration's history just fits
    capped = session_iterations(finished_session.pk, window)

    assert [it.iteration for it in iterations] == list(range(1, ROUNDS))
    passive = [it.passive for it in iterations]
    assert passive == sorted(set(passive)), "each iteration adds what the last one produced"
    assert report["iterations"] == ROUNDS - 1 and report["sessions"] == 1
    assert report["active_tokens"] == sum(
        e.payload["tokens"]
        for e in JournalEvent.objects.filter(session_id=finished_session.pk,
                                             kind="context_assembled")
    )  # fmt: skip
    assert report["passive_tokens"] == sum(passive)
    assert report["active_vs_passive_token_ratio"] > 1
    assert report["window_tokens"] == 200_000 and "pack_passive" in report["setting"]
    # the first passive context holds the reference documents and the starting kernel
    start = JournalEvent.objects.get(session_id=finished_session.pk, kind="candidate_proposed",
                                     payload__iteration=0)  # fmt: skip
    source = KernelSource.objects.get(sha256=start.payload["source_sha256"])
    documents = sum(count_tokens(d.text) for d in cold_start_documents(finished_session.target))
    assert iterations[0].passive > count_tokens(source.text) + documents
    # a window the first iteration fills caps every later one, and leaves active as it was
    assert [it.passive for it in capped] == [window] * len(iterations)
    assert [it.active for it in capped] == [it.active for it in iterations]


def test_no_sessions_or_an_unknown_one_is_an_error(db: None) -> None:
    with pytest.raises(BenchmarkError, match="no sessions"):
        context_economy([])
    with pytest.raises(BenchmarkError, match="has no journal"):
        context_economy([987_654])
