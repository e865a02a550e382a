"""Where a queued session stands in line, and why it waits.

A launch sends the session's first message to the agent queue, which every team's sessions
share: the agent workers take messages in order, one iteration per message, and each running
session queues its next iteration behind the others. A queued session therefore waits behind
the sessions queued before it, for an agent worker to be free of the iterations it runs.
Both are read here from the database (the sessions' statuses, and the advisory locks a worker
holds while it runs an iteration), never from the broker, so a page shows them at once.

The line moves when a session starts, pauses, resumes, stops or ends: `queue_moved` then tells
the watchers of each queued session, whose page asks again for its place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from apps.core.events import EventKind, QueueMoved, publish_quietly, session_group
from apps.runs.models import OptimizationSession
from apps.runs.tasks import sessions_held

logger = logging.getLogger(__name__)

QUEUED = OptimizationSession.Status.QUEUED
TeamSession = tuple[int, int]  # (session id, team id)


@dataclass(frozen=True)
class Line:
    """The host's queued sessions sent to the workers, first first, and the sessions whose
    iteration a worker runs now."""

    queued: list[TeamSession]
    running: list[TeamSession]


@dataclass(frozen=True)
class QueuePlace:
    position: int | None  # 1: the next to start; None: not sent to the workers at all
    reason: str

    @property
    def text(self) -> str:
        """ "2nd in line", as the page and the list show it."""
        return f"{ordinal(self.position)} in line" if self.position else "not in line"


def line_now() -> Line:
    queued = OptimizationSession.objects.filter(status=QUEUED, ticket__gt=0)
    held = sessions_held()
    running = OptimizationSession.objects.filter(pk__in=held).order_by("pk")
    return Line(queued=list(queued.order_by("created_at", "pk").values_list("pk", "team_id")),
                running=list(running.values_list("pk", "team_id")))  # fmt: skip


def queue_place(session: OptimizationSession, line: Line | None = None) -> QueuePlace | None:
    """Where the session stands and why it waits; None unless it is queued."""
    if session.status != QUEUED:
        return None
    if session.ticket == 0:
        return QueuePlace(None, "it was made to run in the process that made it (a benchmark "
                                "or a command), not sent to the agent workers")  # fmt: skip
    line = line or line_now()
    ids = [pk for pk, _ in line.queued]
    ahead = line.queued[: ids.index(session.pk)] if session.pk in ids else line.queued
    return QueuePlace(len(ahead) + 1, waiting_reason(ahead, line.running, session.team_id))


def waiting_reason(ahead: list[TeamSession], running: list[TeamSession], team_id: int) -> str:
    """Why it waits, naming the team's own sessions and counting other teams'."""
    busy = f"the agent workers are running an iteration of {described(running, team_id)}"
    if ahead:
        behind = f"waiting behind {described(ahead, team_id)}, queued before it"
        return f"{behind}; {busy}" if running else behind
    if running:
        return f"next to start, waiting for a free agent worker: {busy}"
    return ("waiting for an agent worker to take it: none is running an iteration now; if it "
            "stays queued, see on the Workers page whether an agent worker is up")  # fmt: skip


def described(sessions: list[TeamSession], team_id: int) -> str:
    """ "sessions #3, #5 and 2 sessions of other teams": other teams' are only counted."""
    own = [f"#{pk}" for pk, team in sessions if team == team_id]
    others = len(sessions) - len(own)
    parts = [f"session{plural(len(own))} {', '.join(own)}"] if own else []
    if others:
        parts.append(f"{others} session{plural(others)} of "
                     f"{'other teams' if others > 1 else 'another team'}")  # fmt: skip
    return " and ".join(parts)


def plural(n: int) -> str:
    return "" if n == 1 else "s"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def queue_moved() -> None:
    """After commit, tell the watchers of every queued session that the line moved."""
    transaction.on_commit(tell_queued_sessions, robust=True)


def tell_queued_sessions() -> None:
    for pk in OptimizationSession.objects.filter(status=QUEUED).values_list("pk", flat=True):
        publish_quietly(session_group(pk), EventKind.QUEUE_MOVED, QueueMoved(session=pk))
