from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models
from pgvector.django import HnswIndex, VectorField

from apps.devices.models import KernelSource
from apps.operators.models import OperatorVersion

EMBEDDING_DIMENSIONS = 384  # all-MiniLM-L6-v2


class Journal(models.Model):
    """A session's journal, under the session's id: what memory knows of the session (its
    team, target and memory mode, copied when the session is made and never changed) and the
    counters only appending moves. `last_seq` is the high-water mark, advanced under this row's
    lock, so sequence numbers are gapless per session without a global serial; `tokens_used`
    sums the journal's `model_called` usage. The session (in `runs`, above memory) makes this
    row when it is made; memory never reads the session."""

    id = models.BigIntegerField(primary_key=True)  # the session's id
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    target = models.CharField(max_length=32)
    memory_mode = models.CharField(max_length=12)
    last_seq = models.PositiveBigIntegerField(default=0)
    tokens_used = models.PositiveBigIntegerField(default=0)  # model tokens

    class Meta:
        ordering = ["-id"]  # newest first, as sessions are listed (and cases were, by session)

    def __str__(self) -> str:
        return f"journal of session {self.pk}"


class JournalEvent(models.Model):
    """One step of a session, appended once. The database refuses UPDATE and DELETE on this
    table (a trigger, migration 0002), so no code path can rewrite history."""

    session = models.ForeignKey(Journal, on_delete=models.PROTECT, related_name="events")
    seq = models.PositiveBigIntegerField()  # 1, 2, 3, ... per session, without gaps
    kind = models.CharField(max_length=40)
    # The loop's idempotency key ("<operator>:<iteration>:<kind>"): a step replayed after a
    # worker died finds its event instead of writing a second one.
    step = models.CharField(max_length=100, blank=True, default="")
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="journal_seq_per_session"),
            models.UniqueConstraint(
                fields=["session", "step"], condition=~models.Q(step=""),
                name="journal_step_once",
            ),
        ]  # fmt: skip

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
    session = models.ForeignKey(Journal, on_delete=models.PROTECT, related_name="cases")
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
    session = models.ForeignKey(Journal, null=True, blank=True, on_delete=models.CASCADE)
    iteration = models.PositiveIntegerField(null=True, blank=True)
    downstream_signal = models.FloatField(default=0.0)  # what happened in the successors
    value = models.FloatField(default=0.0)  # ATU's value score V
    retrievals = models.PositiveIntegerField(default=0)  # N: scored stages it was retrieved in
    adoptions = models.PositiveIntegerField(default=0)
    adopted_operators = models.JSONField(default=list)  # distinct operator slugs
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


class Rule(models.Model):
    """Standing guidance distilled from an experience that earned it (UGC). A person decides:
    candidate -> pending review -> approved (eligible for hot memory) or vetoed; later
    possibly retired. The rule shares its source experience's key and value score."""

    class Status(models.TextChoices):
        CANDIDATE = "candidate"
        PENDING = "pending"
        APPROVED = "approved"
        VETOED = "vetoed"
        RETIRED = "retired"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="rules")
    source_key = models.CharField(max_length=100)  # the experience's MemoryVector key
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CANDIDATE)
    approved_version = models.ForeignKey(
        "RuleVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    frequency = models.FloatField(default=0.0)  # access frequency estimate (UGC)
    reserved_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    reserved_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["team", "source_key"], name="one_rule_per_source"),
        ]

    def __str__(self) -> str:
        return f"rule {self.pk} ({self.status})"


class RuleVersion(models.Model):
    """An immutable wording of a rule; approval is of a version."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    statement = models.TextField()  # what to do
    applies_when = models.TextField()  # conditions
    not_when = models.TextField(blank=True)  # when it does not apply
    evidence = models.JSONField(default=dict)  # source experiences, operators, measured effects
    tokens = models.PositiveIntegerField()
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rule", "number"]
        constraints = [
            models.UniqueConstraint(fields=["rule", "number"], name="rule_version_number"),
        ]

    def __str__(self) -> str:
        return f"{self.rule} v{self.number}"


class RuleTransition(models.Model):
    """Who moved a rule from one state to another, when, on which version, and why."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="transitions")
    version = models.ForeignKey(RuleVersion, null=True, blank=True, on_delete=models.PROTECT)
    from_status = models.CharField(max_length=10, blank=True)
    to_status = models.CharField(max_length=10)
    actor = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    comment = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rule", "at", "pk"]

    def __str__(self) -> str:
        return f"{self.rule}: {self.from_status or '-'} -> {self.to_status}"


class HotMemoryChange(models.Model):
    """A rule entering or leaving hot memory, and why: written each time the resident set is
    rebuilt (after a rule decision or a consolidation) and differs from the one before."""

    class Change(models.TextChoices):
        ENTERED = "entered"
        EVICTED = "evicted"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="hot_changes")
    change = models.CharField(max_length=10, choices=Change.choices)
    reason = models.TextField()  # "displaced: priority 0.0012 < 0.0031 of rule 9 under ..."
    cause = models.CharField(max_length=200, blank=True)  # what rebuilt it: "rule 9 approved"
    priority = models.FloatField(null=True, blank=True)  # V x frequency / tokens at the time
    tokens = models.PositiveIntegerField(null=True, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["team", "rule", "-at"])]

    def __str__(self) -> str:
        return f"{self.rule} {self.change}"
