"""The Reports page: every export of the team with its status, the forms that ask for one,
the knowledge-base import, and downloads (another team's export is a 404)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.core.errors import DomainError
from apps.core.pages import page_of
from apps.reports.forms import (
    ComparisonForm,
    KnowledgeExportForm,
    KnowledgeImportForm,
    SessionReportForm,
)
from apps.reports.models import Export
from apps.reports.selectors import session_choices, team_exports
from apps.reports.services import export_request, knowledge_import, upload_bytes

LISTED = 200  # exports a page


def page(
    request: HttpRequest, membership: Membership, status: int = 200, **forms: Any
) -> HttpResponse:
    sessions = session_choices(membership.team)
    exports = page_of(request, team_exports(membership.team), per_page=LISTED)
    context = {
        "section": "reports", "exports": exports, "page": exports, "sessions": sessions,
        "polling": any(e.is_active for e in exports),
        "can_import": membership.allows(Permission.REVIEW),
        "session_form": forms.get("session") or SessionReportForm(sessions=sessions),
        "comparison_form": forms.get("comparison") or ComparisonForm(sessions=sessions),
        "knowledge_form": forms.get("knowledge") or KnowledgeExportForm(),
        "import_form": forms.get("import") or KnowledgeImportForm(),
    }  # fmt: skip
    if request.htmx and request.GET.get("part") == "exports":  # type: ignore[attr-defined]
        return render(request, "reports/reports.html#exports", context)
    return render(request, "reports/reports.html", context, status=status)


@team_view()
def reports_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    return page(request, membership)


def bound_form(kind: str, request: HttpRequest, membership: Membership) -> Any:
    sessions = session_choices(membership.team)
    if kind == Export.Kind.SESSION:
        return SessionReportForm(request.POST, sessions=sessions)
    if kind == Export.Kind.COMPARISON:
        return ComparisonForm(request.POST, sessions=sessions)
    if kind == Export.Kind.KNOWLEDGE:
        return KnowledgeExportForm(request.POST)
    raise Http404(f"No kind of export {kind!r}.")


@require_POST
@team_view()
def export_create(request: HttpRequest, membership: Membership) -> HttpResponse:
    kind = request.POST.get("kind", "")
    form = bound_form(kind, request, membership)
    if form.is_valid():
        params = {k: v for k, v in form.cleaned_data.items() if k != "format"}
        try:
            export = export_request(team=membership.team, user=request.user, kind=kind,
                                    fmt=form.cleaned_data["format"], params=params)  # fmt: skip
        except DomainError as error:
            form.add_error(None, error.message)
        else:
            export.refresh_from_db()  # a large one is sent after commit, and may have failed
            messages.info(request, export_message(export))
            return redirect("reports", team=membership.team.slug)
    return page(request, membership, status=400, **{kind: form})  # sent back: what was wrong


def export_message(export: Export) -> str:
    if export.status == Export.Status.DONE:
        return f"Export {export.pk} is ready: {export.filename}."
    if export.status == Export.Status.FAILED:
        return f"Export {export.pk} failed: {export.error}"
    return f"Export {export.pk} is large: a worker is making it; its progress shows below."


@require_POST
@team_view(Permission.REVIEW)
def knowledge_import_view(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = KnowledgeImportForm(request.POST, request.FILES)
    if form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            export = knowledge_import(
                team=membership.team,
                user=request.user,
                filename=upload.name or "upload",
                raw=upload_bytes(upload),
            )
        except DomainError as error:
            form.add_error("file", error.message)
        else:
            messages.success(request, export.progress_text)
            return redirect("reports", team=membership.team.slug)
    return page(request, membership, status=400, **{"import": form})


@team_view()
def export_download(request: HttpRequest, membership: Membership, export_id: int) -> HttpResponse:
    export = (
        team_exports(membership.team, with_content=True)
        .filter(pk=export_id, status=Export.Status.DONE)
        .first()
    )
    if export is None:
        raise Http404("No such export, or it is not ready.")
    response = HttpResponse(bytes(export.content or b""), content_type=export.content_type)
    response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
    return response
