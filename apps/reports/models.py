from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.accounts.models import Team


class Export(models.Model):
    """One requested export (or knowledge-base import) and, once made, its file.

    The file is kept in the row rather than on a disk: the agent worker that renders it may run
    on another host than the web process that serves it.
    """

    class Kind(models.TextChoices):
        SESSION = "session", "session report"  # a suite report when the session ran a suite
        COMPARISON = "comparison", "two sessions side by side"
        KNOWLEDGE = "knowledge", "knowledge-base export"
        KNOWLEDGE_IMPORT = "knowledge_import", "knowledge-base import"

    class Format(models.TextChoices):
        HTML = "html", "HTML (self-contained)"
        MARKDOWN = "md", "Markdown"
        PDF = "pdf", "PDF"
        CSV = "csv", "CSV"
        JSON = "json", "JSON"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="exports")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    format = models.CharField(max_length=8, choices=Format.choices)
    params = models.JSONField(default=dict)  # {"session": id} / {"a": id, "b": id} / {}
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    progress_text = models.CharField(max_length=200, blank=True)
    filename = models.CharField(max_length=200, blank=True)
    content_type = models.CharField(max_length=100, blank=True)
    content = models.BinaryField(null=True, blank=True, editable=False)
    size = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["team", "-created_at"])]

    def __str__(self) -> str:
        return f"export {self.pk} ({self.kind} {self.format}, {self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)
