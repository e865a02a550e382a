"""Reports over HTTP: request an export, follow it, download its file; import another team's
knowledge-base file as candidates for review.

No `from __future__ import annotations` here: ninja reads the parameter annotations of
@paginate-wrapped views at run time, where string annotations cannot be resolved.
"""

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Field, File, Router, Schema, Status
from ninja.files import UploadedFile
from ninja.pagination import paginate

from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import DomainError, NotFound
from apps.core.numbers import WholeNumber
from apps.core.pagination import LimitOffset
from apps.reports.models import Export
from apps.reports.selectors import team_exports
from apps.reports.services import export_request, knowledge_import, upload_bytes

router = Router(tags=["reports"])

ExportKind = Literal["session", "comparison", "knowledge"]
ExportFormat = Literal["html", "md", "pdf", "csv", "json"]


class ExportIn(Schema):
    kind: ExportKind
    format: ExportFormat
    session: WholeNumber | None = Field(None, description="the session of a session report")
    a: WholeNumber | None = Field(None, description="the first session of a comparison")
    b: WholeNumber | None = Field(None, description="the second session of a comparison")


class ExportOut(Schema):
    id: int
    kind: str
    format: str
    params: dict[str, Any]
    status: str
    progress: int = Field(..., description="percent")
    progress_text: str
    filename: str
    size: int
    error: str
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None
    file: str | None = Field(None, description="where to download the file once it is done")


def export_out(export: Export) -> dict[str, Any]:
    ready = export.status == Export.Status.DONE
    file = f"/api/teams/{export.team.slug}/exports/{export.pk}/file" if ready else None
    return {
        "id": export.pk, "kind": export.kind, "format": export.format, "params": export.params,
        "status": export.status, "progress": export.progress,
        "progress_text": export.progress_text, "filename": export.filename,
        "size": export.size, "error": export.error,
        "created_by": export.created_by.username if export.created_by else None,
        "created_at": export.created_at, "finished_at": export.finished_at, "file": file,
    }  # fmt: skip


def team_export(request: HttpRequest, slug: str, export_id: int, **more: Any) -> Export:
    team = membership_for(request.user, slug, Permission.VIEW).team
    export = team_exports(team, **more).select_related("team").filter(pk=export_id).first()
    if export is None:
        raise NotFound(f"No export {export_id}.")
    return export


@router.get("/teams/{slug}/exports", response=list[ExportOut])
@paginate(LimitOffset)
def list_exports(request: HttpRequest, slug: str) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    return [export_out(e) for e in team_exports(team).select_related("team")]


@router.post("/teams/{slug}/exports", response={201: ExportOut})
def create_export(request: HttpRequest, slug: str, payload: ExportIn) -> Any:
    """Made at once when small (the answer is `done`); otherwise queued for a worker: follow
    it at /exports/{id} until `done` or `failed`."""
    team = membership_for(request.user, slug, Permission.VIEW).team
    params = {"session": payload.session, "a": payload.a, "b": payload.b}
    export = export_request(team=team, user=request.user, kind=payload.kind, fmt=payload.format,
                            params={k: v for k, v in params.items() if v is not None})  # fmt: skip
    export.refresh_from_db()
    return Status(201, export_out(export))


@router.get("/teams/{slug}/exports/{export_id}", response=ExportOut)
def get_export(request: HttpRequest, slug: str, export_id: int) -> Any:
    return export_out(team_export(request, slug, export_id))


@router.get("/teams/{slug}/exports/{export_id}/file")
def export_file(request: HttpRequest, slug: str, export_id: int) -> Any:
    export = team_export(request, slug, export_id, with_content=True)
    if export.status != Export.Status.DONE:
        raise DomainError(f"export {export_id} is {export.status}, not done", code="not_ready")
    response = HttpResponse(bytes(export.content or b""), content_type=export.content_type)
    response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
    return response


@router.post("/teams/{slug}/knowledge/import", response={201: ExportOut})
def import_knowledge(request: HttpRequest, slug: str, file: File[UploadedFile]) -> Any:
    """A knowledge-base JSON export of another team: its approved and pending rules become
    this team's pending candidates (reviewers and admins)."""
    team = membership_for(request.user, slug, Permission.REVIEW).team
    export = knowledge_import(team=team, user=request.user, filename=file.name or "upload.json",
                              raw=upload_bytes(file))  # fmt: skip
    return Status(201, export_out(export))
