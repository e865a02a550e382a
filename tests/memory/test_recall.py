"""Recall held out by family: what an operator is shown when it may see only other families."""

from __future__ import annotations

from apps.accounts.models import Team
from apps.memory.keys import case_key
from apps.memory.recall import recall
from apps.memory.retrieval import vector_store_for_case
from apps.memory.values import MemoryMode
from apps.runs.models import OptimizationSession
from tests.factories import stored_builtin
from tests.memory.test_retrieval import record_case


def test_other_families_only_hides_the_family_and_this_session(team: Team) -> None:
    relu, sigmoid, gemm = (stored_builtin(slug) for slug in ("relu", "sigmoid", "gemm"))
    earlier = OptimizationSession.objects.create(team=team, target="cpu-c")
    now = OptimizationSession.objects.create(team=team, target="cpu-c")
    own = record_case(earlier, relu, 1, strategy="omp_parallel_for(loop=L1)")
    same_family = record_case(earlier, sigmoid, 1, strategy="omp_parallel_for(loop=L1)")
    other_family = record_case(earlier, gemm, 1, strategy="omp_parallel_for(loop=L1)")
    this_session = record_case(now, gemm, 1, strategy="omp_parallel_for(loop=L1)")
    for case in (own, same_family, other_family, this_session):
        vector_store_for_case(case.pk)

    def recalled(other_families_only: bool) -> set[str]:
        hits = recall(team=team, session_id=now.pk, version=relu, target="cpu-c", incumbent=None,
                      mode=MemoryMode.READ_ONLY,
                      other_families_only=other_families_only).hits  # fmt: skip
        return {hit.key for hit in hits}

    assert recalled(True) == {case_key(other_family.pk)}
    everything = (own, same_family, other_family, this_session)
    assert recalled(False) == {case_key(c.pk) for c in everything}
