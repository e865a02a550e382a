"""Case vectors and retrieval: what the agent is shown from memory at each iteration.

Retrieval runs in three steps (KOPE's graph-aware retrieval, ranked the SAGE way):

1. exact filters in SQL: the team's own items plus shared (team-less) ones, the target, and
   the family, dtype, shape class and correctness when the query gives them; rules only
   while a reviewer's approval stands;
2. semantic nearest neighbours by cosine distance over the HNSW index, a pool of
   POOL_FACTOR x limit candidates;
3. a re-rank in Python, relevance first, outcome evidence second. Hits sort by the key
   (rank_score, downstream, value, similarity), highest first, where rank_score is the
   similarity floored to RELEVANCE_STEP (0.05). Outcome evidence (the downstream signal,
   then the ATU value) therefore only reorders items that are equally relevant to 0.05: a
   strongly valued item never overtakes a clearly more relevant one.

The downstream signal of a case says what became of the attempts built on it, within
DOWNSTREAM_DEPTH (2) generations:

* no successor yet: 0.0;
* at least one correct successor: the best log speedup of a correct successor over the case,
  ln(case latency / successor latency), or the product of the speedups vs parent along the
  path when a latency is missing; 0.0 for a correct successor whose gain is not measurable
  (the case itself had no latency). Positive: building on it paid off; negative: every
  correct successor was slower;
* successors, none correct: DEAD_END_SIGNAL (-0.1, small like SAGE's failure score: a
  failed follow-up does not prove the case was a bad idea).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import CharField, F, Q, QuerySet, Value
from django.db.models.functions import Cast, Concat
from pgvector.django import CosineDistance

from apps.memory.embeddings import MODEL_NAME, embed_one, embed_query, model_version
from apps.memory.keys import case_key
from apps.memory.models import Case, MemoryVector, Rule
from apps.memory.selectors import shared_values
from apps.operators.models import OperatorCase, OperatorVersion

# Total input elements of the timing case, upper bounds (exclusive) of each shape class.
SHAPE_CLASS_BOUNDS = (("tiny", 1e3), ("small", 1e5), ("medium", 1e7))
LARGEST_SHAPE_CLASS = "large"

DOWNSTREAM_DEPTH = 2
DEAD_END_SIGNAL = -0.1

RELEVANCE_STEP = 0.05
POOL_FACTOR = 5
# pgvector 0.6 filters after the HNSW scan, which yields at most ef_search rows: the pool
# needs ef_search >= its size (pgvector's default is 40, its maximum 1000). A wider search also
# finds more of the true nearest: over 100,000 synthetic cases filtered on target and family,
# ef_search 100 (the pool of a top 20) found 0.93 of the exact top 20, 400 found 0.974 and
# 800 found 0.983 for 1.3 ms more at p95 than 400 (`bench retrieval`).
EF_SEARCH_PER_POOL_ITEM = 8
MIN_EF_SEARCH = 40
MAX_EF_SEARCH = 1000

STRATEGY_CHARS = 300
FEEDBACK_CHARS = 240
FEEDBACK_KEYS = ("summary", "reason", "error", "message", "diagnostics", "compiler", "profile")

HIT_FIELDS = (
    "key",
    "kind",
    "text",
    "session_id",
    "iteration",
    "operator_slug",
    "downstream_signal",
    "value",
)


# --- the filter fields of an operator version ------------------------------------------------


def version_dtype(version: OperatorVersion) -> str:
    """The operator version's dtype: that of its first test case ("" without cases)."""
    first = version.cases.first()
    return first.dtype if first else ""


def version_shape_class(version: OperatorVersion) -> str:
    """A coarse size bucket from the total number of input elements of the timing case (the
    last case when none is marked for timing): tiny < 1e3 <= small < 1e5 <= medium < 1e7 <=
    large. Kernels for different buckets meet different bottlenecks (call overhead, cache,
    memory bandwidth), so their lessons transfer less well across buckets."""
    case = version.cases.filter(timing=True).first() or version.cases.last()
    if case is None:
        return ""
    return shape_class(total_input_elements(case))


def total_input_elements(case: OperatorCase) -> int:
    """Over the tensor inputs: an imported problem's number inputs ({dtype, value}) have none."""
    sizes = [[d for d in value["shape"] if isinstance(d, int)]
             for value in case.inputs if "shape" in value]  # fmt: skip
    return sum(math.prod(shape) for shape in sizes)


def shape_class(elements: int) -> str:
    for name, bound in SHAPE_CLASS_BOUNDS:
        if elements < bound:
            return name
    return LARGEST_SHAPE_CLASS


def operator_filters(version: OperatorVersion) -> dict[str, str]:
    """The filter fields a query about this operator version should use."""
    return {
        "family": version.operator.family,
        "dtype": version_dtype(version),
        "shape_class": version_shape_class(version),
        "operator_slug": version.operator.slug,
    }


# --- case vectors ----------------------------------------------------------------------------


def case_summary(case: Case) -> str:
    """A short text of the attempt for embedding and for the agent's context (no code)."""
    version = case.version
    filters = operator_filters(version)
    parts = [
        f"{version.name} ({filters['operator_slug']}, {filters['family']}; {filters['dtype']}, "
        f"{filters['shape_class']}) on {case.target}, iteration {case.iteration}.",
        f"Strategy: {shortened(case.strategy, STRATEGY_CHARS)}",
    ]
    if case.tags:
        parts.append("Tags: " + ", ".join(str(tag) for tag in case.tags) + ".")
    parts.append(outcome_line(case))
    feedback = key_feedback(case.feedback)
    if feedback:
        parts.append(f"Feedback: {feedback}")
    return "\n".join(parts)


def outcome_line(case: Case) -> str:
    words = [f"Outcome: {case.outcome}, {'correct' if case.correct else 'incorrect'}"]
    if case.speedup_vs_reference is not None:
        words.append(f"{case.speedup_vs_reference:.2f}x vs reference")
    if case.speedup_vs_parent is not None:
        words.append(f"{case.speedup_vs_parent:.2f}x vs parent")
    return "; ".join(words) + "."


def key_feedback(feedback: object) -> str:
    """The first lines of the most telling feedback entries, shortened."""
    if not isinstance(feedback, dict):
        return ""
    ordered = [feedback[k] for k in FEEDBACK_KEYS if k in feedback]
    ordered += [v for k, v in feedback.items() if k not in FEEDBACK_KEYS]
    lines = [first_line(v) for v in ordered if isinstance(v, str) and v.strip()]
    return shortened(" | ".join(lines), FEEDBACK_CHARS)


def first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip()


def shortened(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def case_filters(case: Case) -> dict[str, Any]:
    filters = operator_filters(case.version)
    return {
        "target": case.target,
        "family": filters["family"],
        "dtype": filters["dtype"],
        "shape_class": filters["shape_class"],
        "correct": case.correct,
        "operator_slug": filters["operator_slug"],
        "session_id": case.session_id,
        "iteration": case.iteration,
        "team_id": case.session.team_id,
    }


def vector_store_for_case(case_id: int) -> MemoryVector:
    """Create or refresh the case's memory vector. Safe to run twice; leaves the ATU value,
    which only the value updates own, as it is."""
    case = Case.objects.select_related("session", "version__operator").get(pk=case_id)
    text = case_summary(case)
    fields = {
        "kind": MemoryVector.Kind.CASE,
        "text": text,
        "embedding": embed_one(text),
        "model_name": MODEL_NAME,
        "model_version": model_version(),
        "downstream_signal": downstream_signal(case),
        **case_filters(case),
    }
    vector, _ = MemoryVector.objects.update_or_create(key=case_key(case.pk), defaults=fields)
    return vector


# --- the downstream signal -------------------------------------------------------------------


@dataclass(frozen=True)
class Successor:
    correct: bool
    log_gain: float | None  # ln(speedup over the ancestor); None when not measurable


def downstream_from(successors: Iterable[Successor]) -> float:
    successors = list(successors)
    if not successors:
        return 0.0
    gains = [s.log_gain or 0.0 for s in successors if s.correct]
    return max(gains) if gains else DEAD_END_SIGNAL


def downstream_signal(case: Case) -> float:
    return downstream_from(successors_of(case))


def successors_of(case: Case) -> list[Successor]:
    """Children and grandchildren (DOWNSTREAM_DEPTH = 2) with their gain over `case`."""
    rows = Case.objects.filter(Q(parent_id=case.pk) | Q(parent__parent_id=case.pk)).values(
        "pk", "parent_id", "correct", "latency_ms", "speedup_vs_parent"
    )
    by_pk = {row["pk"]: row for row in rows}
    successors = []
    for row in by_pk.values():
        # a grandchild's parent is a child, so it is among the rows
        path = [row] if row["parent_id"] == case.pk else [by_pk[row["parent_id"]], row]
        successors.append(Successor(row["correct"], log_gain(case.latency_ms, path)))
    return successors


def log_gain(ancestor_latency_ms: float | None, path: Sequence[Mapping[str, Any]]) -> float | None:
    """ln(speedup) from an ancestor to the last case of `path`, its descendants in order."""
    latency_ms = path[-1]["latency_ms"]
    if ancestor_latency_ms and latency_ms:
        return math.log(ancestor_latency_ms / latency_ms)
    factors = [step["speedup_vs_parent"] for step in path]
    if all(f is not None and f > 0 for f in factors):
        return sum(math.log(f) for f in factors)
    return None


def refresh_downstream(case_id: int) -> None:
    """Recompute the downstream signal of a case and of the ancestors whose window
    (DOWNSTREAM_DEPTH generations) includes it; call it when the case is added. Vectors not
    written yet are skipped: they compute their signal when they are."""
    case = Case.objects.filter(pk=case_id).first()
    for _ in range(DOWNSTREAM_DEPTH + 1):
        if case is None:
            return
        signal = downstream_signal(case)
        MemoryVector.objects.filter(key=case_key(case.pk)).update(downstream_signal=signal)
        case = case.parent


# --- retrieval -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    text: str
    team_id: int | None  # None: shared (team-less) items only
    target: str
    family: str | None = None
    dtype: str | None = None
    shape_class: str | None = None
    correct: bool | None = None
    kinds: tuple[str, ...] = ("case", "rule", "document")
    limit: int = 20
    exclude_session_id: int | None = None
    exclude_family: str | None = None  # leave-one-family-out: none of this family's items
    # keys of items that come first, in this order, whatever their similarity (at most half
    # the limit): what an earlier session measured on the very kernel being changed
    first: tuple[str, ...] = ()

    @property
    def pool(self) -> int:
        return POOL_FACTOR * self.limit


@dataclass(frozen=True)
class Hit:
    key: str
    kind: str
    text: str
    provenance: dict[str, Any]  # session, iteration, operator
    scores: dict[str, float]  # similarity, downstream, value, rank_score


def retrieve(query: Query) -> list[Hit]:
    vector = embed_query(query.text)
    pinned = pinned_hits(query, vector)
    pinned_keys = {hit.key for hit in pinned}
    nearest = [hit for hit in ranked(nearest_rows(query, vector)) if hit.key not in pinned_keys]
    return [*pinned, *nearest][: query.limit]


def pinned_hits(query: Query, vector: list[float]) -> list[Hit]:
    """The items `query.first` names that pass the query's filters, in that order, at most
    half the limit."""
    if not query.first:
        return []
    named = (
        filtered_items(query)
        .filter(key__in=query.first)
        .annotate(distance=CosineDistance("embedding", vector))
        .values(*HIT_FIELDS, "distance")
    )
    rows = {row["key"]: row for row in with_shared_values(list(named))}
    return [hit_from_row(rows[key]) for key in query.first if key in rows][: query.limit // 2]


def nearest_rows(query: Query, vector: list[float]) -> list[dict[str, Any]]:
    """The pool nearest the vector among the filtered items, by the HNSW index; an exact scan
    of the filtered items when the index left fewer than `limit` (pgvector 0.6 filters after
    the index scan, so a filter that few neighbours pass can starve it)."""
    rows = index_rows(query, vector)
    if len(rows) < query.limit:
        rows = list(exact_search(query, vector))
    return rows


def index_rows(query: Query, vector: list[float]) -> list[dict[str, Any]]:
    # SET LOCAL lasts until the transaction ends: inside a caller's transaction it outlives
    # this query, which only ever widens later HNSW searches.
    with transaction.atomic():
        ef_search_set(query.pool)
        return list(index_search(query, vector))


def ef_search_set(pool: int) -> None:
    ef_search = min(max(MIN_EF_SEARCH, EF_SEARCH_PER_POOL_ITEM * pool), MAX_EF_SEARCH)
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef_search)])


def index_search(query: Query, vector: list[float]) -> QuerySet[MemoryVector, dict[str, Any]]:
    """The filtered nearest-neighbour search in the form the HNSW index serves."""
    search: QuerySet[MemoryVector, dict[str, Any]] = (
        filtered_items(query)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance")
        .values(*HIT_FIELDS, "distance")[: query.pool]
    )
    return search


def exact_search(query: Query, vector: list[float]) -> QuerySet[MemoryVector, dict[str, Any]]:
    # Ordering by "distance + 0" hides the ordering from the HNSW index: PostgreSQL computes
    # the distance of every filtered row and sorts them, exactly.
    search: QuerySet[MemoryVector, dict[str, Any]] = (
        filtered_items(query)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by((F("distance") + Value(0.0)).asc())
        .values(*HIT_FIELDS, "distance")[: query.pool]
    )
    return search


def index_search_plan(query: Query, vector: list[float]) -> str:
    """EXPLAIN ANALYZE of the index search under retrieval's ef_search, to check which index
    serves it."""
    with transaction.atomic():
        ef_search_set(query.pool)
        return index_search(query, vector).explain(analyze=True)


def filtered_items(query: Query) -> QuerySet[MemoryVector]:
    items = MemoryVector.objects.filter(
        kind__in=query.kinds, target=query.target, embedding__isnull=False
    )
    if query.team_id is None:
        items = items.filter(team__isnull=True)
    else:
        items = items.filter(Q(team_id=query.team_id) | Q(team__isnull=True))
    exact = {
        "family": query.family,
        "dtype": query.dtype,
        "shape_class": query.shape_class,
        "correct": query.correct,
    }
    items = items.filter(**{field: value for field, value in exact.items() if value is not None})
    if "rule" in query.kinds:
        items = items.exclude(Q(kind="rule") & ~Q(key__in=approved_rule_keys()))
    if query.exclude_session_id is not None:
        items = items.exclude(session_id=query.exclude_session_id)
    if query.exclude_family is not None:
        items = items.exclude(family=query.exclude_family)
    return items


def approved_rule_keys() -> QuerySet[Any]:
    """The keys of approved rules, as a subquery: a pending, vetoed or retired rule is in the
    knowledge base but never in an agent's context (only a reviewer's approval puts it there)."""
    keys: QuerySet[Any] = (
        Rule.objects.filter(status=Rule.Status.APPROVED)
        .annotate(vector_key=Concat(Value("rule:"), Cast("pk", output_field=CharField())))
        .values("vector_key")
    )
    return keys


def ranked(rows: list[dict[str, Any]]) -> list[Hit]:
    hits = [hit_from_row(row) for row in with_shared_values(rows)]
    return sorted(hits, key=rank_key, reverse=True)


def with_shared_values(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each rule's V read from where ATU credits it: a rule shares its source
    experience's value score (selectors.value_keys); a rule's own vector holds none."""
    rule_keys = [row["key"] for row in rows if row["kind"] == "rule"]
    if not rule_keys:
        return rows
    values = shared_values(rule_keys)
    return [{**row, "value": values[row["key"]]} if row["kind"] == "rule" else row for row in rows]


def hit_from_row(row: dict[str, Any]) -> Hit:
    similarity = 1.0 - float(row["distance"])
    return Hit(
        key=row["key"],
        kind=row["kind"],
        text=row["text"],
        provenance={
            "session": row["session_id"],
            "iteration": row["iteration"],
            "operator": row["operator_slug"] or None,
        },
        scores={
            "similarity": similarity,
            "downstream": row["downstream_signal"],
            "value": row["value"],
            "rank_score": relevance(similarity),
        },
    )


def relevance(similarity: float) -> float:
    """The similarity floored to RELEVANCE_STEP: the first part of the rank key."""
    return round(math.floor(similarity / RELEVANCE_STEP + 1e-9) * RELEVANCE_STEP, 10)


def rank_key(hit: Hit) -> tuple[float, float, float, float]:
    scores = hit.scores
    return (scores["rank_score"], scores["downstream"], scores["value"], scores["similarity"])
