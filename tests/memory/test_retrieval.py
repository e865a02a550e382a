from __future__ import annotations

import json
import math
from collections.abc import Callable
from io import StringIO
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from apps.accounts.models import Team
from apps.memory import tasks
from apps.memory.embeddings import MODEL_NAME, embed, model_version
from apps.memory.keys import case_key, rule_key
from apps.memory.models import Case, JournalEvent, MemoryVector, Rule
from apps.memory.retrieval import (
    DEAD_END_SIGNAL,
    Query,
    Successor,
    case_filters,
    case_summary,
    downstream_from,
    downstream_signal,
    index_search,
    index_search_plan,
    refresh_downstream,
    retrieve,
    shape_class,
    vector_store_for_case,
    version_shape_class,
)
from apps.memory.tasks import embed_case, embed_case_after_commit
from apps.operators.models import OperatorVersion
from apps.runs.models import OptimizationSession
from tests.factories import stored_builtin

QUERY_TEXT = "vectorise the elementwise loop with AVX2 and unroll it by four"


@pytest.fixture
def relu(db: None) -> OperatorVersion:
    return stored_builtin("relu")


@pytest.fixture
def gemm(db: None) -> OperatorVersion:
    return stored_builtin("gemm")


@pytest.fixture
def session(team: Team) -> OptimizationSession:
    return OptimizationSession.objects.create(team=team, target="cpu-c")


def record_case(
    session: OptimizationSession, version: OperatorVersion, iteration: int, **fields: Any
) -> Case:
    """A case as the journal would record it: its journal event first, then the case."""
    seq = JournalEvent.objects.filter(session_id=session.pk).count() + 1
    event = JournalEvent.objects.create(
        session_id=session.pk, seq=seq, kind="case_recorded", payload={}
    )
    defaults: dict[str, Any] = {
        "strategy": "baseline",
        "outcome": Case.Outcome.IMPROVED,
        "correct": True,
        "target": session.target,
        "created_at": timezone.now(),
    }
    return Case.objects.create(
        event=event, session_id=session.pk, version=version, iteration=iteration,
        **(defaults | fields),
    )  # fmt: skip


def vector_at_similarity(query: np.ndarray, similarity: float, seed: int) -> list[float]:
    """A unit vector whose cosine similarity to the unit vector `query` is `similarity`."""
    noise = np.random.default_rng(seed).standard_normal(query.shape[0])
    orthogonal = noise - (noise @ query) * query
    orthogonal /= np.linalg.norm(orthogonal)
    vector = similarity * query + math.sqrt(1 - similarity**2) * orthogonal
    return [float(x) for x in vector]


def shared_vector(key: str, embedding: list[float], **fields: Any) -> MemoryVector:
    """A team-less case vector on cpu-c that passes the default filters of `query_for`."""
    defaults: dict[str, Any] = {
        "kind": "case", "text": key, "target": "cpu-c", "family": "activation",
        "dtype": "float32", "shape_class": "large", "correct": True,
    }  # fmt: skip
    return MemoryVector.objects.create(key=key, embedding=embedding, **(defaults | fields))


def query_for(team: Team | None, **fields: Any) -> Query:
    defaults: dict[str, Any] = {
        "text": QUERY_TEXT, "team_id": team.pk if team else None, "target": "cpu-c",
        "family": "activation", "dtype": "float32", "shape_class": "large",
    }  # fmt: skip
    return Query(**(defaults | fields))


# --- filter fields and summaries -------------------------------------------------------------


@pytest.mark.parametrize(
    ("elements", "bucket"),
    [(1, "tiny"), (999, "tiny"), (1000, "small"), (99_999, "small"), (100_000, "medium"),
     (9_999_999, "medium"), (10_000_000, "large")],
)  # fmt: skip
def test_shape_classes_bucket_the_input_elements(elements: int, bucket: str) -> None:
    assert shape_class(elements) == bucket


def test_the_shape_class_comes_from_the_timing_case(
    relu: OperatorVersion, gemm: OperatorVersion
) -> None:
    assert version_shape_class(relu) == "large"  # 67,108,864 elements
    assert version_shape_class(gemm) == "medium"  # two 384 x 384 matrices


def test_a_number_input_counts_no_elements(relu: OperatorVersion) -> None:
    """An imported problem's scalar inputs are stored as {dtype, value}: embedding each case
    of KernelBench's Matrix_scalar_multiplication failed with KeyError('shape')."""
    case = relu.cases.get(timing=True)
    case.inputs = [*case.inputs, {"dtype": "float64", "value": 3.5}]
    case.save(update_fields=["inputs"])

    assert version_shape_class(relu) == "large"


def test_a_case_summary_is_short_and_names_what_matters(
    session: OptimizationSession, relu: OperatorVersion
) -> None:
    case = record_case(
        session, relu, 3, strategy="Vectorise the loop with AVX2 intrinsics.",
        tags=["simd", "avx2"], speedup_vs_reference=1.84, speedup_vs_parent=1.21,
        feedback={"compiler": "warning: unused variable 'i'\nat line 3", "other": 7},
    )  # fmt: skip

    summary = case_summary(case)

    for expected in ("ReLU", "relu", "activation", "float32", "large", "cpu-c", "iteration 3",
                     "AVX2 intrinsics", "simd, avx2", "improved, correct",
                     "1.84x vs reference", "1.21x vs parent", "unused variable"):  # fmt: skip
        assert expected in summary
    assert "at line 3" not in summary  # first lines of feedback only
    assert len(summary) < 600


def test_case_filters_carry_what_exact_filters_and_provenance_need(
    session: OptimizationSession, relu: OperatorVersion, team: Team
) -> None:
    case = record_case(session, relu, 5, correct=False, outcome=Case.Outcome.INCORRECT)

    assert case_filters(case) == {
        "target": "cpu-c", "family": "activation", "dtype": "float32", "shape_class": "large",
        "correct": False, "operator_slug": "relu", "session_id": session.pk, "iteration": 5,
        "team_id": team.pk,
    }  # fmt: skip


# --- the vector of a case --------------------------------------------------------------------


def test_the_embed_task_writes_the_case_vector_once_and_keeps_its_value(
    session: OptimizationSession, relu: OperatorVersion, team: Team
) -> None:
    case = record_case(session, relu, 1, strategy="unroll by eight")

    embed_case(case.pk)
    MemoryVector.objects.filter(key=case_key(case.pk)).update(value=0.4)  # as ATU would
    case.strategy = "unroll by eight, then vectorise"
    case.save()
    embed_case(case.pk)

    vector = MemoryVector.objects.get()
    assert vector.key == f"case:{case.pk}" and vector.kind == "case"
    assert vector.model_name == MODEL_NAME == "sentence-transformers/all-MiniLM-L6-v2"
    assert vector.model_version == model_version()
    assert vector.text == case_summary(case) and "then vectorise" in vector.text
    assert vector.team_id == team.pk and vector.session_id == session.pk
    assert vector.value == 0.4
    np.testing.assert_allclose(vector.embedding, embed([vector.text])[0], atol=1e-5)


def test_the_embed_task_exits_quietly_when_the_case_is_gone(db: None) -> None:
    embed_case(10**9)

    assert not MemoryVector.objects.exists()


def test_embedding_is_queued_only_after_commit(
    session: OptimizationSession,
    relu: OperatorVersion,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    queued: list[int] = []
    monkeypatch.setattr(tasks.embed_case, "delay", queued.append)
    case = record_case(session, relu, 1)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        embed_case_after_commit(case.pk)
        assert queued == []

    assert len(callbacks) == 1 and queued == [case.pk]


# --- the downstream signal -------------------------------------------------------------------


def test_downstream_of_a_case_without_successors_is_neutral() -> None:
    assert downstream_from([]) == 0.0


def test_downstream_is_the_best_correct_gain() -> None:
    successors = [Successor(True, 0.1), Successor(False, None), Successor(True, 0.4)]

    assert downstream_from(successors) == 0.4


def test_downstream_is_negative_when_every_successor_failed() -> None:
    assert downstream_from([Successor(False, None), Successor(False, None)]) == DEAD_END_SIGNAL


def test_downstream_reaches_grandchildren_through_latencies(
    session: OptimizationSession, relu: OperatorVersion
) -> None:
    root = record_case(session, relu, 1, latency_ms=10.0)
    child = record_case(session, relu, 2, parent=root, latency_ms=8.0, speedup_vs_parent=1.25)
    record_case(session, relu, 3, parent=child, latency_ms=4.0, speedup_vs_parent=2.0)
    record_case(session, relu, 4, parent=child, correct=False, outcome="incorrect")

    assert downstream_signal(root) == pytest.approx(math.log(10 / 4))
    assert downstream_signal(child) == pytest.approx(math.log(2.0))


def test_downstream_multiplies_speedups_when_the_ancestor_has_no_latency(
    session: OptimizationSession, relu: OperatorVersion
) -> None:
    root = record_case(session, relu, 1)
    child = record_case(session, relu, 2, parent=root, speedup_vs_parent=1.5)
    record_case(session, relu, 3, parent=child, speedup_vs_parent=2.0, latency_ms=1.0)

    assert downstream_signal(root) == pytest.approx(math.log(3.0))


def test_a_new_case_refreshes_the_downstream_of_its_ancestors(
    session: OptimizationSession, relu: OperatorVersion
) -> None:
    root = record_case(session, relu, 1, latency_ms=10.0)
    child = record_case(session, relu, 2, parent=root, latency_ms=10.0)
    for case in (root, child):
        vector_store_for_case(case.pk)

    failed = record_case(session, relu, 3, parent=child, correct=False, outcome="crashed")
    refresh_downstream(failed.pk)
    assert MemoryVector.objects.get(key=case_key(child.pk)).downstream_signal == DEAD_END_SIGNAL
    assert MemoryVector.objects.get(key=case_key(root.pk)).downstream_signal == 0.0

    faster = record_case(session, relu, 4, parent=child, latency_ms=5.0)
    refresh_downstream(faster.pk)
    child_vector = MemoryVector.objects.get(key=case_key(child.pk))
    root_vector = MemoryVector.objects.get(key=case_key(root.pk))
    assert child_vector.downstream_signal == pytest.approx(math.log(2.0))
    assert root_vector.downstream_signal == pytest.approx(math.log(2.0))


# --- retrieval -------------------------------------------------------------------------------


def test_cases_of_another_team_target_or_family_never_come_back_even_when_identical(
    team: Team, other_team: Team, relu: OperatorVersion, gemm: OperatorVersion
) -> None:
    ours = OptimizationSession.objects.create(team=team, target="cpu-c")
    theirs = OptimizationSession.objects.create(team=other_team, target="cpu-c")
    on_cuda = OptimizationSession.objects.create(team=team, target="cuda-triton")
    strategy = "vectorise the loop with AVX2 and unroll it by four"
    included = record_case(ours, relu, 1, strategy="keep the scalar loop")
    excluded = [record_case(theirs, relu, 1, strategy=strategy),
                record_case(on_cuda, relu, 1, strategy=strategy),
                record_case(ours, gemm, 1, strategy=strategy)]  # fmt: skip
    for case in (included, *excluded):
        vector_store_for_case(case.pk)

    for case in excluded:
        query = Query(text=case_summary(case), team_id=team.pk, target="cpu-c",
                      family="activation", dtype="float32")  # fmt: skip
        assert [hit.key for hit in retrieve(query)] == [case_key(included.pk)]


@pytest.mark.parametrize(
    "mismatch",
    [{"target": "cuda-triton"}, {"family": "matmul"}, {"dtype": "float16"},
     {"shape_class": "small"}, {"team": "other"}, {"correct": False}],
    ids=lambda m: next(iter(m)),
)  # fmt: skip
def test_exact_filters_hold_even_for_an_identical_item(
    team: Team, other_team: Team, mismatch: dict[str, Any]
) -> None:
    query_vector = [float(x) for x in embed([QUERY_TEXT])[0]]
    fields = {"team": other_team} if "team" in mismatch else mismatch
    shared_vector("case:identical-mismatch", query_vector, text=QUERY_TEXT, **fields)
    shared_vector("case:identical-match", query_vector, text=QUERY_TEXT)
    shared_vector("case:far", vector_at_similarity(np.array(query_vector), 0.1, seed=1))

    hits = retrieve(query_for(team, correct=True))

    assert [hit.key for hit in hits] == ["case:identical-match", "case:far"]


def test_a_teams_own_and_shared_items_come_back_but_not_another_teams(
    team: Team, other_team: Team
) -> None:
    query_vector = embed([QUERY_TEXT])[0]
    for key, owner in (("case:own", team), ("case:shared", None), ("case:theirs", other_team)):
        shared_vector(key, vector_at_similarity(query_vector, 0.5, seed=len(key)), team=owner)

    assert {hit.key for hit in retrieve(query_for(team))} == {"case:own", "case:shared"}
    assert {hit.key for hit in retrieve(query_for(None))} == {"case:shared"}


def test_the_items_a_query_names_first_come_first_within_its_filters_and_limit(
    team: Team, other_team: Team
) -> None:
    q = embed([QUERY_TEXT])[0]
    for n, similarity in enumerate((0.95, 0.9, 0.85, 0.8)):
        shared_vector(f"case:near-{n}", vector_at_similarity(q, similarity, n))
    shared_vector("case:far", vector_at_similarity(q, 0.1, 7))
    shared_vector("case:farther", vector_at_similarity(q, 0.05, 8))
    shared_vector("case:theirs", vector_at_similarity(q, 0.05, 9), team=other_team)

    named = ("case:farther", "case:theirs", "case:far", "case:gone")
    hits = retrieve(query_for(team, limit=4, first=named))

    # another team's item stays out, a key with no item is skipped, and the named items
    # take at most half the limit
    assert [hit.key for hit in hits] == ["case:farther", "case:far", "case:near-0", "case:near-1"]
    assert round(hits[0].scores["similarity"], 2) == 0.05


def test_a_filter_left_out_of_the_query_does_not_filter(team: Team) -> None:
    query_vector = [float(x) for x in embed([QUERY_TEXT])[0]]
    shared_vector("case:matmul", query_vector, family="matmul", dtype="float16")

    hits = retrieve(query_for(team, family=None, dtype=None))

    assert [hit.key for hit in hits] == ["case:matmul"]


def test_hits_rank_by_relevance_first_then_downstream_then_value(team: Team) -> None:
    q = embed([QUERY_TEXT])[0]
    shared_vector("case:closest-plain", vector_at_similarity(q, 0.945, 1))
    shared_vector("case:good-outcome", vector_at_similarity(q, 0.935, 2), downstream_signal=0.5)
    shared_vector(
        "case:good-outcome-valued", vector_at_similarity(q, 0.92, 3), downstream_signal=0.5,
        value=0.8,
    )  # fmt: skip
    shared_vector(
        "case:less-relevant-best-outcome", vector_at_similarity(q, 0.82, 4),
        downstream_signal=2.0, value=1.0,
    )  # fmt: skip

    hits = retrieve(query_for(team))

    assert [hit.key for hit in hits] == [
        "case:good-outcome-valued",  # same 0.90 bucket as the next two, best outcome
        "case:good-outcome",  # same downstream as the first, less value
        "case:closest-plain",
        "case:less-relevant-best-outcome",  # a lower bucket: outcome cannot lift it
    ]
    scores = [hit.scores for hit in hits]
    assert [s["rank_score"] for s in scores] == [0.9, 0.9, 0.9, 0.8]
    assert [round(s["similarity"], 3) for s in scores] == [0.92, 0.935, 0.945, 0.82]
    assert scores[0]["downstream"] == 0.5 and scores[0]["value"] == 0.8


def test_a_rule_ranks_by_the_value_it_shares_with_its_source_experience(team: Team) -> None:
    q = embed([QUERY_TEXT])[0]
    rule = Rule.objects.create(team=team, source_key="case:source", status="approved")
    shared_vector("case:source", vector_at_similarity(q, 0.3, 9), family="reduction", value=0.7)
    shared_vector(rule_key(rule.pk), vector_at_similarity(q, 0.93, 1), kind="rule")
    shared_vector("case:plain", vector_at_similarity(q, 0.935, 2), value=0.3)

    hits = retrieve(query_for(team))

    assert [hit.key for hit in hits] == [rule_key(rule.pk), "case:plain"]  # one 0.90 bucket
    assert hits[0].scores["value"] == 0.7  # the V that ATU credits when the rule is adopted


def test_hits_carry_their_provenance(
    session: OptimizationSession, relu: OperatorVersion, team: Team
) -> None:
    case = record_case(session, relu, 7, strategy="vectorise with AVX2 and unroll by four")
    vector_store_for_case(case.pk)

    [hit] = retrieve(query_for(team))

    assert hit.key == case_key(case.pk) and hit.kind == "case"
    assert hit.text == case_summary(case)
    assert hit.provenance == {"session": session.pk, "iteration": 7, "operator": "relu"}
    assert set(hit.scores) == {"similarity", "downstream", "value", "rank_score"}
    assert hit.scores["similarity"] > 0.3


def test_retrieval_can_leave_out_a_session_and_kinds_and_stops_at_the_limit(
    session: OptimizationSession, team: Team
) -> None:
    q = embed([QUERY_TEXT])[0]
    for n in range(6):
        shared_vector(f"case:{n}", vector_at_similarity(q, 0.5 + n / 20, n))
    shared_vector("case:this-session", [float(x) for x in q], session_id=session.pk)
    shared_vector("rule:1", [float(x) for x in q], kind="rule")

    keys = [h.key for h in retrieve(query_for(team, kinds=("case",), limit=3,
                                              exclude_session_id=session.pk))]  # fmt: skip

    assert keys == ["case:5", "case:4", "case:3"]


def test_the_index_serves_filtered_searches_and_a_starved_one_falls_back_to_a_scan(
    team: Team,
) -> None:
    q = embed([QUERY_TEXT])[0]
    for n in range(120):  # the nearest 120 are rules: more than the index scan yields (100)
        shared_vector(f"rule:{n}", vector_at_similarity(q, 0.9, n), kind="rule")
    for n, similarity in enumerate((0.3, 0.2, 0.1)):
        shared_vector(f"case:{n}", vector_at_similarity(q, similarity, 1000 + n))
    query = query_for(team, kinds=("case",), limit=2)
    with connection.cursor() as cursor:
        # a small table: steer the planner as if it were large
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")

    plan = index_search_plan(query, [float(x) for x in q])
    index_rows = list(index_search(query, [float(x) for x in q]))
    hits = retrieve(query)

    assert "Index Scan using memory_vector_hnsw" in plan
    assert index_rows == []  # the index scan met only rules, which the filter dropped
    assert [hit.key for hit in hits] == ["case:0", "case:1"]


def test_the_retrieval_benchmark_command_reports_finite_positive_numbers(db: None) -> None:
    out = StringIO()

    call_command("bench", "retrieval", "--json", "--cases", "2000", "--quick", stdout=out,
                 stderr=StringIO())  # fmt: skip

    report = json.loads(out.getvalue())
    for key in ("retrieval_p50_ms", "retrieval_p95_ms", "context_assembly_ms",
                "active_vs_passive_token_ratio"):  # fmt: skip
        assert math.isfinite(report[key]) and report[key] > 0, key
    assert report["cases"] == 2000
    assert not MemoryVector.objects.filter(key__startswith="bench:").exists()
    with connection.cursor() as cursor:  # the benchmark rebuilt it in a rolled-back transaction
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'memory_vector_hnsw'")
        assert cursor.fetchone() == (1,)
