"""Launching and controlling sessions. Engineers and admins may (Permission.RUN), checked here
so that the API, the pages and the commands obey the same rule."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.db.models import F

from apps.accounts.models import Team
from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import Conflict, DomainError, NotFound
from apps.devices.services import kernel_source_store
from apps.devices.targets import target_get
from apps.memory.journal import journal_append
from apps.operators.selectors import operator_get, suite_get, version_get
from apps.runs.config import Budgets, Measurement, OperatorEntry, SessionConfig, code_version
from apps.runs.models import OptimizationSession
from apps.runs.queue import queue_moved

logger = logging.getLogger(__name__)

AnyUser = AbstractBaseUser | AnonymousUser
STATUS = OptimizationSession.Status
MAX_UPLOAD_CHARS = 200_000  # a starting kernel brought with a session (API or launch form)


def check_starting_kernels(kernels: dict[str, str]) -> None:
    too_big = [k for k, v in kernels.items() if len(v) > MAX_UPLOAD_CHARS]
    if too_big:
        raise DomainError(f"starting kernels over {MAX_UPLOAD_CHARS} characters: "
                          f"{', '.join(too_big)}")  # fmt: skip
    empty = [k for k, v in kernels.items() if not v.strip()]
    if empty:
        raise DomainError(f"starting kernels that are empty: {', '.join(map(repr, empty))}")


def operator_entries(team: Team, slugs: list[str], uploads: dict[str, str]) -> list[OperatorEntry]:
    """Each operator's current version; an uploaded starting kernel is stored by its hash."""
    unknown_uploads = set(uploads) - set(slugs)
    if unknown_uploads:
        raise DomainError(f"starting kernels for operators not in the session: "
                          f"{', '.join(map(repr, sorted(unknown_uploads)))}")  # fmt: skip
    entries = []
    for slug in dict.fromkeys(slugs):
        version = version_get(operator_get(team, slug))
        upload = uploads.get(slug)
        sha = kernel_source_store(upload).sha256 if upload else None
        entries.append(OperatorEntry(slug, version.pk, version.number, sha))
    return entries


def suite_operators(team: Team, suite_slug: str) -> tuple[list[str], dict[str, Any]]:
    """The suite the team sees under that slug (its own before a shared one, as shown)."""
    try:
        suite = suite_get(team, suite_slug)
    except NotFound:
        raise DomainError(f"no suite {suite_slug!r}") from None  # a bad request, not a 404
    slugs = [entry.operator.slug for entry in suite.entries.select_related("operator")]
    return slugs, {"id": suite.pk, "slug": suite.slug, "name": suite.name}


def session_create(
    *,
    team: Team,
    user: AnyUser | None,
    operators: list[str] | None = None,
    suite: str | None = None,
    target: str = "cpu-c",
    policy: str = "offline",
    model: str = "",
    memory_mode: str = "read_write",
    seed: int = 0,
    offline_prior: str = "written-in",
    memory_scope: str = "team",
    budgets: Budgets | None = None,
    measurement: Measurement | None = None,
    uploads: dict[str, str] | None = None,
    label: str = "",
    start: bool = True,
) -> OptimizationSession:
    if user is not None:
        membership_for(user, team.slug, Permission.RUN)
    check_starting_kernels(uploads or {})
    require_runnable_here(target, policy)
    if bool(operators) == bool(suite):
        raise DomainError("name either operators or a suite")
    suite_info = None
    if suite:
        operators, suite_info = suite_operators(team, suite)
    config = SessionConfig(
        target=target, policy=policy, memory_mode=memory_mode,
        operators=operator_entries(team, list(operators or []), uploads or {}),
        model=model or (default_model() if policy == "claude" else ""), seed=seed,
        offline_prior=offline_prior, memory_scope=memory_scope,
        budgets=budgets or default_budgets(), measurement=measurement or Measurement(),
        suite=suite_info, code_version=code_version(),
    )  # fmt: skip
    config.check()
    return session_from_config(team, user, config, label=label, start=start)


def require_runnable_here(target: str, policy: str) -> None:
    target_get(target)
    if policy == "claude" and not settings.ANTHROPIC_API_KEY:
        raise DomainError("the Claude policy needs ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY_FILE) "
                          "set for the workbench; the offline policy needs nothing")  # fmt: skip


def default_model() -> str:
    return str(settings.KOPE_CLAUDE_MODEL)


def default_budgets() -> Budgets:
    return Budgets(rounds=settings.KOPE_SESSION_ROUNDS, tokens=settings.KOPE_SESSION_TOKENS,
                   plateau=settings.KOPE_SESSION_PLATEAU,
                   context_tokens=settings.KOPE_CONTEXT_TOKENS)  # fmt: skip


def session_from_config(
    team: Team,
    user: AnyUser | None,
    config: SessionConfig,
    *,
    label: str = "",
    start: bool = True,
    rerun_of: OptimizationSession | None = None,
) -> OptimizationSession:
    with transaction.atomic():
        session = OptimizationSession.objects.create(
            team=team, target=config.target, policy=config.policy,
            memory_mode=config.memory_mode, config=config.as_json(), label=label[:200],
            created_by=user if isinstance(user, User) else None,
            rerun_of=rerun_of,
        )  # fmt: skip
        if start:
            enqueue_advance(session.pk)
    return session


def enqueue_advance(session_id: int) -> None:
    """Queue the session's next iteration under a new ticket (older messages become stale)."""
    with transaction.atomic():
        OptimizationSession.objects.filter(pk=session_id).update(ticket=F("ticket") + 1)
        ticket = OptimizationSession.objects.values_list("ticket", flat=True).get(pk=session_id)
        transaction.on_commit(lambda: publish_advance(session_id, ticket))


def publish_advance(session_id: int, ticket: int) -> bool:
    """Send the message; False when the broker refused it. The session is committed by now: a
    broker that refuses it must not turn a launch, resume or stop into a 500 (whose retry
    would launch again); the session keeps its ticket, and a worker queues it as it connects
    to the broker (`resume_orphaned`), or, connected all along, once it has stalled
    (`resend_stalled`)."""
    from apps.runs.tasks import advance_session

    try:
        advance_session.delay(session_id, ticket)
    except Exception:  # kombu's OperationalError (Redis), ChannelError (the folder broker), ...
        logger.exception("session %s: the broker refused its next iteration; an agent worker "
                         "queues it again in a few minutes", session_id)  # fmt: skip
        return False
    return True


def _locked(session: OptimizationSession, user: AnyUser | None) -> OptimizationSession:
    if user is not None:
        membership_for(user, session.team.slug, Permission.RUN)
    return OptimizationSession.objects.select_for_update().get(pk=session.pk)


# The statuses each control acts in; in any other it is refused. The session page disables
# a control outside them.
ACTS_IN = {
    "pause": (STATUS.QUEUED, STATUS.RUNNING),
    "resume": (STATUS.PAUSED,),
    "stop": (STATUS.QUEUED, STATUS.RUNNING, STATUS.PAUSED),
}


def _actor(user: AnyUser | None) -> str:
    return user.get_username() if user is not None and user.is_authenticated else "system"


@transaction.atomic
def session_pause(*, session: OptimizationSession, user: AnyUser | None) -> OptimizationSession:
    """The iteration in flight finishes; no further one starts until it is resumed."""
    locked = _locked(session, user)
    if locked.status not in ACTS_IN["pause"]:
        raise Conflict(f"a {locked.status} session cannot be paused")
    locked.status, locked.status_reason = STATUS.PAUSED, f"paused by {_actor(user)}"
    locked.save(update_fields=["status", "status_reason"])
    queue_moved()
    journal_append(session_id=locked.pk, kind="session_paused",
                   payload={"status": STATUS.PAUSED, "actor": _actor(user)})  # fmt: skip
    return locked


@transaction.atomic
def session_resume(*, session: OptimizationSession, user: AnyUser | None) -> OptimizationSession:
    locked = _locked(session, user)
    if locked.status not in ACTS_IN["resume"]:
        raise Conflict(f"a {locked.status} session cannot be resumed")
    locked.status, locked.status_reason = STATUS.RUNNING, ""
    locked.save(update_fields=["status", "status_reason"])
    queue_moved()
    journal_append(session_id=locked.pk, kind="session_resumed",
                   payload={"status": STATUS.RUNNING, "actor": _actor(user)})  # fmt: skip
    enqueue_advance(locked.pk)
    return locked


@transaction.atomic
def session_stop(*, session: OptimizationSession, user: AnyUser | None) -> OptimizationSession:
    """A running session finishes the iteration in flight, then stops; others stop now."""
    locked = _locked(session, user)
    if locked.status not in ACTS_IN["stop"]:
        raise Conflict(f"the session is already {locked.status}")
    reason = f"stopped by {_actor(user)}"
    queue_moved()
    journal_append(session_id=locked.pk, kind="session_stopped",
                   payload={"status": STATUS.STOPPING, "actor": _actor(user)})  # fmt: skip
    locked.status, locked.status_reason = STATUS.STOPPING, reason
    locked.save(update_fields=["status", "status_reason"])
    enqueue_advance(locked.pk)  # the advancer sees STOPPING and finishes the session
    return locked


def session_rerun(*, session: OptimizationSession, user: AnyUser | None) -> OptimizationSession:
    """A new session with the same configuration (the workbench's code version is today's)."""
    if user is not None:
        membership_for(user, session.team.slug, Permission.RUN)
    config = replace(SessionConfig.from_json(session.config), code_version=code_version())
    require_runnable_here(config.target, config.policy)  # the key may have gone since
    return session_from_config(session.team, user, config, label=f"re-run of {session}",
                               rerun_of=session)  # fmt: skip
