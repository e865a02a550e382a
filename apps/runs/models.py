from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.accounts.models import Team


class OptimizationSession(models.Model):
    """One optimization session: the agent's loop over an operator or a suite on a target.

    `last_seq` is the journal's high-water mark, advanced under this row's lock, so journal
    sequence numbers are gapless per session without a global serial. `config` holds
    everything needed to run it again (see apps/runs/config.py); where the loop stands is
    read from the journal, never kept here.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        PAUSED = "paused"  # by a person, or by the policy when its API gave up
        STOPPING = "stopping"  # a person asked; the iteration in flight finishes first
        FINISHED = "finished"
        FAILED = "failed"

    team = models.ForeignKey(Team, on_delete=models.CASCADE)
    target = models.CharField(max_length=32)
    label = models.CharField(max_length=200, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    status_reason = models.TextField(blank=True)
    policy = models.CharField(max_length=20, default="offline")
    memory_mode = models.CharField(max_length=12, default="read_write")
    config = models.JSONField(default=dict)
    tokens_used = models.PositiveBigIntegerField(default=0)  # model tokens, from the journal
    # Each queued "advance" message carries the ticket current when it was sent; only that one
    # may go on, so a session restarted after a worker died never runs two chains at once.
    ticket = models.PositiveIntegerField(default=0)
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.label or f"session {self.pk}"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING, self.Status.STOPPING)
