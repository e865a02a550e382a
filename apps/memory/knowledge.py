"""The knowledge base: cases, rules and documents searched together, by meaning and filters.

Cases get their vectors from the agent worker as they are recorded (apps/memory/tasks.py);
rules get theirs the same way when they are proposed and whenever a decision changes their
wording (`rule_vector_store`); documents (the targets' cold-start documents) are written by
`document_vector_store`, idempotently, for everyone (no team).

A search is the team's own cases and rules plus the shared documents, narrowed by exact
filters, then ordered by cosine similarity to the query; items below MIN_SIMILARITY are not
hits unless their text holds the query word for word. Without a query, the newest come first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import CharField, F, Q, QuerySet, Value
from django.db.models.functions import Cast, Concat
from pgvector.django import CosineDistance

from apps.accounts.models import Team
from apps.memory.embeddings import MODEL_NAME, embed, embed_one, model_version
from apps.memory.keys import id_in_key, rule_key
from apps.memory.models import Case, MemoryVector, Rule, RuleTransition, RuleVersion

KIND = MemoryVector.Kind
# all-MiniLM-L6-v2 puts unrelated texts below about 0.15 and related ones above 0.35.
MIN_SIMILARITY = 0.25
RESULT_LIMIT = 30
QUERY_CHARS = 300


# --- writing vectors -------------------------------------------------------------------------


def rule_text(version: RuleVersion) -> str:
    """The wording as the agent reads it (the same layout as rules.Wording.as_text)."""
    parts = [version.statement, f"Applies when: {version.applies_when}"]
    if version.not_when:
        parts.append(f"Not when: {version.not_when}")
    return "\n".join(parts)


def rule_vector_store(rule_id: int) -> MemoryVector | None:
    """Create or refresh the rule's vector from its approved version (else its latest), with the
    filter fields of the experience it came from. Leaves the value alone; None when the rule
    is gone."""
    rule = Rule.objects.filter(pk=rule_id).select_related("approved_version").first()
    if rule is None:
        return None
    version = rule.approved_version or rule.versions.order_by("-number").first()
    if version is None:
        return None
    source = MemoryVector.objects.filter(key=rule.source_key).first()
    inherited = ("target", "family", "dtype", "shape_class", "operator_slug")
    fields = {name: getattr(source, name) if source else "" for name in inherited}
    return vector_store(key=rule_key(rule.pk), kind=KIND.RULE, text=rule_text(version),
                        team=rule.team, fields=fields)  # fmt: skip


def document_vector_store(
    *, key: str, text: str, summary: str, target: str, team: Team | None = None
) -> MemoryVector:
    """A document's vector: the whole text to read, the embedding of its summary (the model
    reads only the first 256 word pieces of a text anyway)."""
    return vector_store(key=key, kind=KIND.DOCUMENT, text=text, team=team,
                        fields={"target": target}, embed_text=summary)  # fmt: skip


def vector_store(
    *,
    key: str,
    kind: str,
    text: str,
    team: Team | None,
    fields: dict[str, Any],
    embed_text: str | None = None,
) -> MemoryVector:
    """Idempotent: the embedding is computed only when the text or the model changed."""
    version = model_version()
    current = MemoryVector.objects.filter(key=key).first()
    same = (
        current is not None
        and current.text == text
        and current.model_version == version
        and current.embedding is not None
    )
    values = {"kind": kind, "text": text, "team": team, **fields}
    if not same:
        vector = embed([embed_text if embed_text is not None else text])[0]
        values |= {"embedding": [float(x) for x in vector], "model_name": MODEL_NAME,
                   "model_version": version}  # fmt: skip
    stored, _ = MemoryVector.objects.update_or_create(key=key, defaults=values)
    return stored


# --- searching -------------------------------------------------------------------------------


OUTCOMES = tuple(Case.Outcome.values)
STATUSES = tuple(Rule.Status.values)
KINDS = tuple(KIND.values)


@dataclass(frozen=True)
class Filters:
    """A search as the URL says it: every field optional, unknown values ignored."""

    q: str = ""
    kind: str = ""
    operator: str = ""
    outcome: str = ""  # cases only
    status: str = ""  # rules only
    target: str = ""

    @classmethod
    def from_query(cls, query: Any) -> Filters:
        def pick(name: str, allowed: tuple[str, ...]) -> str:
            value = str(query.get(name, ""))
            return value if value in allowed else ""

        return cls(
            q=" ".join(str(query.get("q", "")).split())[:QUERY_CHARS],
            kind=pick("kind", KINDS),
            operator=str(query.get("operator", "")).strip()[:64],
            outcome=pick("outcome", OUTCOMES),
            status=pick("status", STATUSES),
            target=str(query.get("target", "")).strip()[:32],
        )

    def narrowed(self) -> bool:
        return bool(self.kind or self.operator or self.outcome or self.status or self.target)


@dataclass
class Result:
    """One item found, with where it came from (filled in by `with_provenance`)."""

    key: str
    kind: str
    text: str
    similarity: float | None
    target: str
    operator: str
    created_at: Any
    case: Case | None = None
    rule: Rule | None = None
    rule_version: RuleVersion | None = None
    approved: RuleTransition | None = None
    source_case_id: int | None = None
    origin: str | None = None  # a document's file, filled in by the page

    @property
    def title(self) -> str:
        """A document's first heading (its key when it has none)."""
        first = self.text.lstrip().split("\n", 1)[0]
        return first.lstrip("#").strip() if first.startswith("#") else self.key

    @property
    def number(self) -> int | None:
        suffix = self.key.partition(":")[2]
        return int(suffix) if suffix.isdecimal() else None


def keys_of(queryset: QuerySet[Any], prefix: str) -> QuerySet[Any]:
    """The MemoryVector keys ("case:42") of a queryset's rows, as a subquery."""
    keys: QuerySet[Any] = queryset.annotate(
        vector_key=Concat(Value(prefix), Cast("pk", output_field=CharField()))
    ).values("vector_key")
    return keys


def knowledge_items(team: Team, filters: Filters) -> QuerySet[MemoryVector]:
    """The team's cases and rules and the shared documents that pass the exact filters."""
    items = MemoryVector.objects.filter(
        Q(team=team, kind__in=(KIND.CASE, KIND.RULE)) | Q(kind=KIND.DOCUMENT, team__isnull=True)
        | Q(kind=KIND.DOCUMENT, team=team)
    )  # fmt: skip
    if filters.kind:
        items = items.filter(kind=filters.kind)
    if filters.operator:
        items = items.filter(operator_slug=filters.operator)
    if filters.target:
        items = items.filter(target=filters.target)
    if filters.outcome:
        cases = Case.objects.filter(session__team=team, outcome=filters.outcome)
        items = items.filter(kind=KIND.CASE, key__in=keys_of(cases, "case:"))
    if filters.status:
        rules = Rule.objects.filter(team=team, status=filters.status)
        items = items.filter(kind=KIND.RULE, key__in=keys_of(rules, "rule:"))
    return items


def knowledge_search(team: Team, filters: Filters, *, limit: int = RESULT_LIMIT) -> list[Result]:
    """Hits by meaning (or word for word) under the filters; the newest items without a query.
    Exact cosine distances over the filtered items, not the HNSW index: pgvector 0.6 filters
    after an index scan, which a team's share of a large memory could leave empty."""
    items = knowledge_items(team, filters)
    if not filters.q:
        rows = items.order_by("-created_at", "-pk").values(*ROW_FIELDS)[:limit]
        return with_provenance(team, [result_of(row) for row in rows])
    vector = embed_one(filters.q)
    near = (
        items.annotate(distance=CosineDistance("embedding", vector))
        .filter(Q(distance__lte=1 - MIN_SIMILARITY) | Q(text__icontains=filters.q))
        .order_by((F("distance") + Value(0.0)).asc(nulls_last=True), "-pk")
        .values(*ROW_FIELDS, "distance")[:limit]
    )
    return with_provenance(team, [result_of(row) for row in near])


ROW_FIELDS = ("key", "kind", "text", "target", "operator_slug", "created_at")


def result_of(row: dict[str, Any]) -> Result:
    distance = row.get("distance")
    return Result(
        key=row["key"], kind=row["kind"], text=row["text"], target=row["target"],
        operator=row["operator_slug"], created_at=row["created_at"],
        similarity=None if distance is None else 1.0 - float(distance),
    )  # fmt: skip


def with_provenance(team: Team, results: list[Result]) -> list[Result]:
    """Attach each case's session, operator and outcome, and each rule's wording, status, who
    approved it and the case it was distilled from."""
    case_ids = [r.number for r in results if r.kind == KIND.CASE and r.number]
    cases = Case.objects.filter(session__team=team, pk__in=case_ids)
    by_case = {c.pk: c for c in cases.select_related("version__operator", "session")}
    rule_ids = [r.number for r in results if r.kind == KIND.RULE and r.number]
    rules = Rule.objects.filter(team=team, pk__in=rule_ids).select_related("approved_version")
    by_rule = {r.pk: r for r in rules.prefetch_related("versions", "transitions__actor")}
    for result in results:
        if result.kind == KIND.CASE and result.number is not None:
            result.case = by_case.get(result.number)
        elif result.kind == KIND.RULE and result.number in by_rule:
            rule_provenance(result, by_rule[result.number])
    return results


def rule_provenance(result: Result, rule: Rule) -> None:
    result.rule = rule
    versions = sorted(rule.versions.all(), key=lambda v: v.number)
    result.rule_version = rule.approved_version or (versions[-1] if versions else None)
    approvals = [t for t in rule.transitions.all() if t.to_status == Rule.Status.APPROVED]
    result.approved = max(approvals, key=lambda t: (t.at, t.pk), default=None)
    result.source_case_id = id_in_key(rule.source_key, "case")


def team_document(team: Team, key: str) -> MemoryVector | None:
    """A document the team may read: a shared one or its own."""
    return (
        MemoryVector.objects.filter(kind=KIND.DOCUMENT, key=key)
        .filter(Q(team=team) | Q(team__isnull=True))
        .first()
    )


def knowledge_operators(team: Team) -> list[str]:
    """The operator slugs the team's items name, for the filter's choices."""
    slugs = (
        MemoryVector.objects.filter(team=team)
        .exclude(operator_slug="")
        .values_list("operator_slug", flat=True)
        .distinct()
    )
    return sorted(slugs)


def knowledge_targets(team: Team) -> list[str]:
    targets = (
        MemoryVector.objects.filter(Q(team=team) | Q(team__isnull=True, kind=KIND.DOCUMENT))
        .exclude(target="")
        .values_list("target", flat=True)
        .distinct()
    )
    return sorted(targets)
