"""Exports: requested by a team member, made inline when small and by the agent worker when
large, kept with their status and progress; and the knowledge-base import."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import Team
from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.accounts.services import team_lock
from apps.core.errors import DomainError, NotFound
from apps.memory.models import Case, Rule
from apps.memory.rules import AnyUser, rule_propose
from apps.reports.collect import comparison_report, session_report
from apps.reports.knowledge import (
    ImportFileError,
    imported_rules,
    knowledge_data,
    knowledge_markdown,
    parse_knowledge_file,
)
from apps.reports.models import Export
from apps.reports.redact import without_secrets
from apps.reports.render import CONTENT_TYPES, render
from apps.runs.models import OptimizationSession

logger = logging.getLogger(__name__)

KIND, FORMAT, STATUS = Export.Kind, Export.Format, Export.Status
FORMATS: dict[str, list[str]] = {
    KIND.SESSION: [f.value for f in FORMAT],
    KIND.COMPARISON: [f.value for f in FORMAT],
    KIND.KNOWLEDGE: [FORMAT.MARKDOWN.value, FORMAT.JSON.value],
}
INLINE_ROWS = 400  # cases (or rules) up to which an export is made in the request
STALE = timedelta(minutes=20)  # a running export untouched this long lost its worker
MAX_IMPORT_BYTES = 10 * 1024 * 1024

Progress = Callable[[int, str], None]


def team_session(team: Team, session_id: Any) -> OptimizationSession:
    session = OptimizationSession.objects.filter(team=team, pk=as_id(session_id)).first()
    if session is None:
        raise NotFound(f"No session {session_id!r}.")
    return session


def named_session(team: Team, params: dict[str, Any], name: str) -> OptimizationSession:
    if params.get(name) is None:
        raise DomainError(f"{name!r} is missing: the id of one of the team's sessions")
    return team_session(team, params[name])


def as_id(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DomainError(f"{value!r} is not a session id") from None


def export_size(team: Team, kind: str, params: dict[str, Any]) -> int:
    """The rows an export reads: its sessions' cases, or the team's rules."""
    if kind == KIND.KNOWLEDGE:
        return Rule.objects.filter(team=team).count()
    ids = [params["session"]] if kind == KIND.SESSION else [params["a"], params["b"]]
    return Case.objects.filter(session_id__in=ids).count()


def checked_params(team: Team, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    if kind == KIND.SESSION:
        return {"session": named_session(team, params, "session").pk}
    if kind == KIND.COMPARISON:
        a, b = named_session(team, params, "a"), named_session(team, params, "b")
        if a.pk == b.pk:
            raise DomainError("pick two different sessions to compare")
        return {"a": a.pk, "b": b.pk}
    return {}


@transaction.atomic
def export_request(
    *, team: Team, user: AnyUser, kind: str, fmt: str, params: dict[str, Any]
) -> Export:
    """Ask for an export; made here when small, else queued for the agent worker."""
    member = membership_for(user, team.slug, Permission.VIEW).user
    if kind not in FORMATS:
        raise DomainError(f"no export of kind {kind!r}; one of {', '.join(FORMATS)}")
    if fmt not in FORMATS[kind]:
        raise DomainError(f"a {kind} export comes as {', '.join(FORMATS[kind])}, not {fmt!r}")
    params = checked_params(team, kind, params)
    export = Export.objects.create(team=team, kind=kind, format=fmt, params=params,
                                   created_by=member)  # fmt: skip
    if export_size(team, kind, params) <= INLINE_ROWS:
        export_execute(export.pk)
        export.refresh_from_db()
    else:
        transaction.on_commit(lambda: export_enqueue(export.pk))
    return export


def export_enqueue(export_id: int) -> None:
    """Send a large export to the agent worker. The export is committed by now: a broker that
    refuses the message must not turn the request into a 500 and leave the export queued with
    no worker ever to make it; it fails with the reason, to be asked for again."""
    from apps.reports.tasks import make_export

    try:
        make_export.delay(export_id)
    except Exception as error:  # kombu's OperationalError (Redis), ChannelError (the folder broker)
        logger.exception("export %s: the broker refused it", export_id)
        export_fail(export_id, f"the agent worker's queue refused it ({type(error).__name__}); "
                               "ask for it again")  # fmt: skip


def export_claim(export_id: int, *, retrying: bool = False) -> Export | None:
    """Queued (or running with a dead worker) becomes running; None when another has it, it is
    done, or it is gone: a task delivered twice makes the file once. A retry of the task takes
    back the export its own earlier attempt left running when the database went away."""
    now = timezone.now()
    claimable = Q(status=STATUS.QUEUED) | Q(status=STATUS.RUNNING, started_at__lt=now - STALE)
    if retrying:  # the attempt that left it running has ended: it sent this retry
        claimable |= Q(status=STATUS.RUNNING)
    claimed = Export.objects.filter(claimable, pk=export_id).update(
        status=STATUS.RUNNING, started_at=now, progress=0, progress_text="starting", error=""
    )
    return Export.objects.select_related("team").get(pk=export_id) if claimed else None


def export_lost_in(export_id: int) -> timedelta | None:
    """How long until a running export counts as lost to its worker (STALE after it started);
    None when it is not running."""
    started = (Export.objects.filter(pk=export_id, status=STATUS.RUNNING)
               .values_list("started_at", flat=True).first())  # fmt: skip
    if started is None:
        return None
    return max(started + STALE - timezone.now(), timedelta(0))


def export_execute(export_id: int, *, retrying: bool = False) -> str | None:
    """Make the file of a queued export and keep it in the row; returns the final status."""
    export = export_claim(export_id, retrying=retrying)
    if export is None:
        return None

    def progress(percent: int, text: str) -> None:
        Export.objects.filter(pk=export_id, status=STATUS.RUNNING).update(
            progress=percent, progress_text=text[:200], started_at=timezone.now()
        )

    try:
        filename, content = export_content(export, progress)
    except DomainError as error:
        return export_fail(export_id, error.message)
    except (OperationalError, InterfaceError):
        raise  # the database is away, not the export broken: the task retries it
    except Exception as error:
        logger.exception("export %s failed", export_id)
        return export_fail(export_id, f"{type(error).__name__}: {str(error)[:500]}")
    Export.objects.filter(pk=export_id, status=STATUS.RUNNING).update(
        status=STATUS.DONE, progress=100, progress_text="done", filename=filename,
        content_type=CONTENT_TYPES[export.format], content=content, size=len(content),
        finished_at=timezone.now(),
    )  # fmt: skip
    return STATUS.DONE


def export_fail(export_id: int, message: str) -> str:
    """The export failed: the reason is kept (without secrets: the page and the API show it)."""
    Export.objects.filter(pk=export_id).update(
        status=STATUS.FAILED,
        error=without_secrets(message),
        progress_text="failed",
        finished_at=timezone.now(),
    )
    return STATUS.FAILED


def export_content(export: Export, progress: Progress) -> tuple[str, bytes]:
    """The export's file name and bytes, read from the database now."""
    team, params, fmt = export.team, export.params, export.format
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    progress(10, "reading the rows")
    if export.kind == KIND.KNOWLEDGE:
        data = knowledge_data(team)
        progress(60, f"writing {len(data['rules'])} rules")
        body = (knowledge_markdown(data).encode() if fmt == FORMAT.MARKDOWN
                else json.dumps(data, indent=2, ensure_ascii=False).encode())  # fmt: skip
        return f"knowledge-{team.slug}-{stamp}.{fmt}", body
    if export.kind == KIND.SESSION:
        data = session_report(team_session(team, params["session"]))
        name = f"session-{params['session']}"
    else:
        a, b = team_session(team, params["a"]), team_session(team, params["b"])
        data = comparison_report(a, b)
        name = f"compare-{a.pk}-{b.pk}"
    progress(60, f"rendering {fmt}")
    return f"{name}-{stamp}.{fmt}", render(data, fmt)


# --- knowledge-base import ---------------------------------------------------------------------


def knowledge_import(*, team: Team, user: AnyUser, filename: str, raw: bytes) -> Export:
    """Another team's rules into this team's review queue, as pending candidates, all or
    none. Recorded as an export row once it has ended, done or failed; a bad file raises
    ImportFileError after its failure is recorded."""
    member = membership_for(user, team.slug, Permission.REVIEW).user
    record = partial(import_record, team=team, filename=filename, created_by=member,
                     started_at=timezone.now())  # fmt: skip
    try:
        return knowledge_import_done(team, raw, record)
    except ImportFileError as error:
        message = without_secrets(f"{filename}: {error.message}")
        record(status=STATUS.FAILED, error=message, progress_text="failed")
        raise ImportFileError(message) from error
    except Exception as error:  # a bug or a database error: recorded, with the reason
        record(status=STATUS.FAILED, progress_text="failed",
               error=f"{filename}: {type(error).__name__}: {str(error)[:500]}")  # fmt: skip
        raise


@transaction.atomic
def knowledge_import_done(team: Team, raw: bytes, record: Callable[..., Export]) -> Export:
    """The rules and their done record commit together: an import is never recorded "running",
    so a request that dies mid-way leaves nothing behind for the page to poll for ever."""
    summary = knowledge_import_rules(team, raw)
    body = json.dumps(summary, indent=2).encode()
    export = record(status=STATUS.DONE, progress=100, progress_text=summary["text"][:200],
                    content_type=CONTENT_TYPES["json"], content=body, size=len(body))  # fmt: skip
    export.filename = f"import-{export.pk}-summary.json"
    export.save(update_fields=["filename"])
    return export


def upload_bytes(upload: UploadedFile[Any]) -> bytes:
    """An uploaded knowledge file's bytes: one over MAX_IMPORT_BYTES is refused by its size
    before it is read (the upload is on disk; read whole, a huge one would fill the memory)."""
    if upload.size is not None and upload.size > MAX_IMPORT_BYTES:
        raise ImportFileError(f"the file is {upload.size} bytes; at most {MAX_IMPORT_BYTES}")
    return bytes(upload.read(MAX_IMPORT_BYTES + 1))


def import_record(*, team: Team, filename: str, started_at: datetime, **fields: Any) -> Export:
    """The row of an import that has ended, done or failed (its reason without secrets)."""
    fields["error"] = without_secrets(fields.get("error", ""))
    return Export.objects.create(
        team=team, kind=KIND.KNOWLEDGE_IMPORT, format=FORMAT.JSON, params={"file": filename[:200]},
        started_at=started_at, finished_at=timezone.now(), **fields,
    )  # fmt: skip


@transaction.atomic
def knowledge_import_rules(team: Team, raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_IMPORT_BYTES:
        raise ImportFileError(f"the file is {len(raw)} bytes; at most {MAX_IMPORT_BYTES}")
    data = parse_knowledge_file(raw)
    if data["team"]["slug"] == team.slug:
        raise ImportFileError(f"team.slug: the file is {team.name}'s own knowledge base")
    rules = imported_rules(data)
    # One import into a team at a time: a second import of the same file then finds the
    # first one's rules and counts them as already imported, not as its own.
    team_lock(team)
    before = set(Rule.objects.filter(team=team).values_list("pk", flat=True))
    proposed = [rule_propose(team=team, source_key=r.source_key, wording=r.wording,
                             evidence=r.evidence) for r in rules]  # fmt: skip
    new = [rule.pk for rule in proposed if rule.pk not in before]
    skipped = len(data["rules"]) - len(rules)
    text = (f"{len(new)} rules from {data['team'].get('name') or data['team']['slug']} put up for "
            f"review; {len(rules) - len(new)} already imported; {skipped} vetoed or retired "
            "left out")  # fmt: skip
    return {"from_team": data["team"], "new_rule_ids": new, "already_imported":
            len(rules) - len(new), "left_out": skipped, "text": text}  # fmt: skip
