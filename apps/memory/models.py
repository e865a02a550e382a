from __future__ import annotations

from django.db import models
from pgvector.django import HnswIndex, VectorField

from apps.devices.models import KernelSource
from apps.operators.models import OperatorVersion
from apps.runs.models import OptimizationSession

EMBEDDING_DIMENSIONS = 384  # all-MiniLM-L6-v2


class JournalEvent(models.Model):
    """One step of a session, appended once. The database refuses UPDATE and DELETE on this
    table (a trigger, migration 0002), so no code path can rewrite history."""

    session = models.ForeignKey(
        OptimizationSession, on_delete=models.PROTECT, related_name="events"
    )
    seq = models.PositiveBigIntegerField()  # 1, 2, 3, ... per session, without gaps
    kind = models.CharField(max_length=40)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="journal_seq_per_session"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.kind}"


class Case(models.Model):
    """One attempt as a structured record, made only from its journal event (so the forest
    can be rebuilt from the journal alone)."""

    class Outcome(models.TextChoices):
        IMPROVED = "improved"
        REGRESSED = "regressed"
        NO_CHANGE = "no_change"
        COMPILE_ERROR = "compile_error"
        INCORRECT = "incorrect"
        CRASHED = "crashed"
        TIMED_OUT = "timed_out"
        REJECTED = "rejected"

    event = models.OneToOneField(
        JournalEvent, primary_key=True, on_delete=models.PROTECT, related_name="case"
    )  # a case's id is its event's id, which a rebuild keeps
    session = models.ForeignKey(OptimizationSession, on_delete=models.PROTECT, related_name="cases")
    iteration = models.PositiveIntegerField()
    version = models.ForeignKey(OperatorVersion, on_delete=models.PROTECT)
    target = models.CharField(max_length=32)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    strategy = models.TextField()
    tags = models.JSONField(default=list)
    source = models.ForeignKey(KernelSource, null=True, blank=True, on_delete=models.PROTECT)
    validation = models.JSONField(default=dict)  # per-case errors
    latency_ms = models.FloatField(null=True, blank=True)
    speedup_vs_reference = models.FloatField(null=True, blank=True)
    speedup_vs_parent = models.FloatField(null=True, blank=True)
    feedback = models.JSONField(default=dict)  # compiler and tool feedback
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    correct = models.BooleanField()
    confidence = models.FloatField(default=1.0)
    retrieved = models.JSONField(default=list)  # item keys that were in context
    adopted = models.JSONField(default=list)  # [{"key", "why"}]
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["session", "iteration", "pk"]
        constraints = [
            # one attempt per iteration of an operator in a session: a replayed iteration
            # cannot record a second case
            models.UniqueConstraint(
                fields=["session", "version", "iteration"], name="case_once_per_iteration"
            ),
        ]
        indexes = [models.Index(fields=["version", "target"])]

    def __str__(self) -> str:
        return f"case {self.pk} ({self.outcome})"


class MemoryVector(models.Model):
    """A retrievable item (a case summary, a rule, a document) with its embedding and the
    fields exact filters run on."""

    class Kind(models.TextChoices):
        CASE = "case"
        RULE = "rule"
        DOCUMENT = "document"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    key = models.CharField(max_length=100, unique=True)  # "case:42", "rule:7", "doc:..."
    text = models.TextField()
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    model_name = models.CharField(max_length=100, blank=True)
    model_version = models.CharField(max_length=40, blank=True)
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.CASCADE)
    target = models.CharField(max_length=32, blank=True)
    family = models.CharField(max_length=32, blank=True)
    dtype = models.CharField(max_length=16, blank=True)
    shape_class = models.CharField(max_length=32, blank=True)
    correct = models.BooleanField(null=True)
    operator_slug = models.CharField(max_length=64, blank=True)
    session = models.ForeignKey(
        OptimizationSession, null=True, blank=True, on_delete=models.CASCADE
    )
    iteration = models.PositiveIntegerField(null=True, blank=True)
    downstream_signal = models.FloatField(default=0.0)  # what happened in the successors
    value = models.FloatField(default=0.0)  # the learning issue's V
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            HnswIndex(
                name="memory_vector_hnsw", fields=["embedding"], m=16, ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            models.Index(fields=["target", "family", "dtype", "shape_class"]),
        ]  # fmt: skip

    def __str__(self) -> str:
        return self.key
