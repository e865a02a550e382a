from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.accounts.models import Team


class OptimizationSession(models.Model):
    """One optimization session: the agent's loop over an operator or a suite on a target.

    `last_seq` is the journal's high-water mark, advanced under this row's lock, so journal
    sequence numbers are gapless per session without a global serial.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE)
    target = models.CharField(max_length=32)
    label = models.CharField(max_length=200, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.label or f"session {self.pk}"
