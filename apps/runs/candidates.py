"""The candidate a journal event proposed or a case evaluated, as the policy's value type. The
lookups are memory's (apps/memory/case_views.py); memory, below the agents, returns a plain
ProposedKernel, and the runs layer, which sees both, wraps it."""

from __future__ import annotations

from apps.agents.policy import Candidate
from apps.memory.case_views import ProposedKernel, proposed_in, proposed_kernel
from apps.memory.models import Case, JournalEvent


def as_candidate(kernel: ProposedKernel) -> Candidate:
    return Candidate(kernel.source, kernel.strategy, kernel.flags, kernel.threads)


def candidate_of(event: JournalEvent) -> Candidate:
    return as_candidate(proposed_in(event))


def candidate_of_case(case: Case) -> Candidate:
    """The candidate a case evaluated, as it was proposed (flags and threads included)."""
    return as_candidate(proposed_kernel(case))
