from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models

from apps.accounts.models import Team
from apps.devices.digests import source_digest
from apps.operators.models import OperatorVersion


class KernelSource(models.Model):
    """A candidate's code, stored once by content hash."""

    sha256 = models.CharField(max_length=64, unique=True)
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.sha256[:12]

    @staticmethod
    def digest_of(text: str) -> str:
        """The key a source is stored under (and the journal names it by)."""
        return source_digest(text)


class Evaluation(models.Model):
    """One candidate evaluated against one operator version on one target with one setting.

    Unique on exactly that, so evaluating the same candidate again returns this verdict.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"  # the evaluation could not be done (not a verdict on the candidate)

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE)
    version = models.ForeignKey(OperatorVersion, on_delete=models.PROTECT)
    target = models.CharField(max_length=32)
    source = models.ForeignKey(KernelSource, on_delete=models.PROTECT)
    options = models.JSONField()  # apps.devices.evaluator.EvalSettings
    options_key = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)  # the worker on the latest attempt
    verdict = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "version", "target", "options_key"], name="evaluation_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source} on {self.version} ({self.target})"


class Profile(models.Model):
    """A structured profile of one evaluated candidate and its Chrome Trace Event JSON."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="profiles")
    tool = models.CharField(max_length=32)
    case_id = models.CharField(max_length=100)
    data = models.JSONField()
    trace = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.tool} profile of {self.evaluation}"


class KernelTrial(models.Model):
    """A kernel a team member brought to an operator's page (pasted or uploaded) to have it
    evaluated. Evaluations are shared by every team that asks for the same kernel, operator
    version, target and settings; a trial is what makes one visible to its team."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="kernel_trials")
    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="trials")
    name = models.CharField(max_length=200)  # the uploaded file's name, or "pasted"
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} on {self.evaluation.version}"
