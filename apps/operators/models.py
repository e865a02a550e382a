from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.accounts.models import Team
from apps.operators.spec import FAMILIES


class Operator(models.Model):
    """A task the agent optimizes. Its content lives in versions; the newest is current.

    Built-in operators have no team and are visible to every team; imported ones belong to
    the team that imported them.
    """

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE)
    slug = models.SlugField(max_length=64)
    family = models.CharField(max_length=32, choices=[(f, f) for f in FAMILIES])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "slug"], name="operator_slug_per_team", nulls_distinct=False
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class OperatorVersion(models.Model):
    """One immutable version of an operator; results always name the version they ran on."""

    class Origin(models.TextChoices):
        BUILTIN = "builtin"
        KERNELBENCH = "kernelbench"
        NPUKERNELBENCH = "npukernelbench"
        EDITED = "edited"

    operator = models.ForeignKey(Operator, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    level = models.PositiveSmallIntegerField()
    description = models.TextField()
    spec = models.JSONField()  # inputs, outputs, attributes, tolerances (apps.operators.spec)
    reference_kind = models.CharField(max_length=20)  # how refrun loads reference_source
    reference_source = models.JSONField()  # file name -> text, exactly as given
    content_hash = models.CharField(max_length=64)
    origin = models.CharField(max_length=20, choices=Origin.choices)
    origin_path = models.CharField(max_length=500, blank=True)
    scale = models.FloatField(default=1.0)  # sizes shrunk by this factor on import
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["operator", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["operator", "number"], name="version_number_unique"),
            models.UniqueConstraint(
                fields=["operator", "content_hash"], name="version_content_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(level__in=[1, 2, 3]), name="version_level_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.operator.slug} v{self.number}"


class OperatorCase(models.Model):
    version = models.ForeignKey(OperatorVersion, on_delete=models.CASCADE, related_name="cases")
    position = models.PositiveIntegerField()
    case_id = models.CharField(max_length=100)
    params = models.JSONField()
    dtype = models.CharField(max_length=16)
    timing = models.BooleanField(default=False)
    inputs = models.JSONField(default=list)  # [{"shape", "dtype"}] the reference was given
    outputs = models.JSONField(default=list)  # [{"shape", "dtype"}] recorded from the reference
    unsupported_targets = models.JSONField(default=list)  # targets that cannot represent it

    class Meta:
        ordering = ["version", "position"]
        constraints = [
            models.UniqueConstraint(fields=["version", "case_id"], name="case_id_per_version"),
        ]

    def __str__(self) -> str:
        return self.case_id


class StartingKernel(models.Model):
    version = models.ForeignKey(
        OperatorVersion, on_delete=models.CASCADE, related_name="starting_kernels"
    )
    target = models.CharField(max_length=32)
    source = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "target"], name="one_start_per_target"),
        ]

    def __str__(self) -> str:
        return f"{self.version} on {self.target}"


class Suite(models.Model):
    """An ordered list of operators (order matters: easy first helps the agent)."""

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE)
    slug = models.SlugField(max_length=64)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    # The folder an import made it from (resolved, as ImportRun.path); blank for other suites.
    source = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "slug"], name="suite_slug_per_team", nulls_distinct=False
            ),
        ]

    def __str__(self) -> str:
        return self.name


class SuiteEntry(models.Model):
    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="entries")
    position = models.PositiveIntegerField()
    operator = models.ForeignKey(Operator, on_delete=models.CASCADE)

    class Meta:
        ordering = ["suite", "position"]
        constraints = [
            models.UniqueConstraint(fields=["suite", "position"], name="suite_position_unique"),
            models.UniqueConstraint(fields=["suite", "operator"], name="suite_operator_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.suite} #{self.position}"


class ImportRun(models.Model):
    """One import of a folder: its progress while it runs and its per-operator report."""

    class Status(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    path = models.CharField(max_length=500)
    format = models.CharField(max_length=20)
    scale = models.FloatField(default=1.0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=list)  # [{"operator", "outcome", "reason"}]
    # How often a process started importing problem number `attempts_at` (0-based): one past
    # the first found the run where a worker had died importing it.
    attempts = models.PositiveIntegerField(default=0)
    attempts_at = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"import of {self.path}"
