from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import models, transaction

from apps.accounts.models import Team
from apps.memory.models import Journal


class SessionQuerySet(models.QuerySet["OptimizationSession"]):
    def bulk_create(self, objs: Iterable[OptimizationSession], *args: Any,
                    **kwargs: Any) -> list[OptimizationSession]:  # fmt: skip
        """Sessions made at once (a test, a seed) get their journals at once too."""
        with transaction.atomic(using=self.db):
            made = super().bulk_create(objs, *args, **kwargs)
            Journal.objects.bulk_create(journal_for(session) for session in made)
        return made


class OptimizationSession(models.Model):
    """One optimization session: the agent's loop over an operator or a suite on a target.

    Its journal (`memory.Journal`, under the same id) is made with it, in the same
    transaction: memory sits below runs, so the journal carries the session's id and keeps its
    own counters (`last_seq`, `tokens_used`, read here from it). `config` holds everything
    needed to run it again (see apps/runs/config.py); where the loop stands is read from the
    journal, never kept here.
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
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    status_reason = models.TextField(blank=True)
    policy = models.CharField(max_length=20, default="offline")
    memory_mode = models.CharField(max_length=12, default="read_write")
    config = models.JSONField(default=dict)
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
    journal_read: Journal | None = None  # not a field: a list's journals, read at once

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.label or f"session {self.pk}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """However the session is made (the service, a benchmark, a test), its journal is made
        with it (`bulk_create`, which passes save() by, makes them too)."""
        adding = self._state.adding
        with transaction.atomic():
            super().save(*args, **kwargs)
            if adding:
                journal_for(self).save(force_insert=True)

    @property
    def journal(self) -> Journal:
        """Read afresh each time, except in a list given its journals (`with_journals`)."""
        return self.journal_read or Journal.objects.get(pk=self.pk)

    @property
    def last_seq(self) -> int:
        """The journal's high-water mark, 0 before its first event."""
        return self.journal.last_seq

    @property
    def tokens_used(self) -> int:
        """Model tokens, summed by the journal from its `model_called` events."""
        return self.journal.tokens_used

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING, self.Status.STOPPING)


def journal_for(session: OptimizationSession) -> Journal:
    """A new session's journal row, not saved yet: what memory reads of the session."""
    return Journal(id=session.pk, team_id=session.team_id, target=session.target,
                   memory_mode=session.memory_mode)  # fmt: skip


def with_journals(sessions: Iterable[OptimizationSession]) -> list[OptimizationSession]:
    """The sessions, their journals read in one query: a list shows each one's counters."""
    listed = list(sessions)
    journals = Journal.objects.in_bulk([s.pk for s in listed])
    for session in listed:
        session.journal_read = journals[session.pk]
    return listed
