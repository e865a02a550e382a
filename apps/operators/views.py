from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.core.errors import Conflict, DomainError
from apps.core.pages import page_of
from apps.operators import selectors
from apps.operators.archives import Limits
from apps.operators.forms import ImportForm, KernelEvaluateForm, OperatorFilterForm, VersionEditForm
from apps.operators.importing import (
    ImportRequestError,
    import_enqueue,
    import_start,
    import_start_from_archive,
    summary,
)
from apps.operators.models import ImportRun, Operator, OperatorVersion
from apps.operators.services import version_edit


@team_view()
def operator_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = OperatorFilterForm(request.GET)
    form.is_valid()  # a field that is not valid (a stale link's family) is left out alone
    family, level = form.cleaned_data.get("family"), form.cleaned_data.get("level")
    operators = selectors.operators_listed_for(membership.team)
    context = {
        "section": "operators",
        "form": form,
        "versions": selectors.latest_versions(operators, family=family or None, level=level),
        "total": operators.count(),
    }
    return render(request, "operators/operator_list.html", context)


@team_view()
def operator_detail(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    operator = selectors.operator_get(membership.team, slug)
    number = request.GET.get("v", "")
    chosen = int(number) if number.isascii() and number.isdigit() else None  # not "²"
    version = selectors.version_get(operator, chosen)
    context = operator_context(version, membership)
    return render(request, "operators/operator_detail.html", context)


def operator_context(
    version: OperatorVersion,
    membership: Membership,
    form: VersionEditForm | None = None,
    kernel_form: KernelEvaluateForm | None = None,
) -> dict[str, object]:
    operator = version.operator
    versions = list(operator.versions.order_by("-number"))
    newest = versions[0]  # there is one: `version` is among them
    # Only the newest version is edited: a form on an older one would save its values over
    # every change made since.
    editable = (operator.team_id == membership.team.pk and membership.allows(Permission.RUN)
                and version == newest)  # fmt: skip
    initial = {"name": version.name, "description": version.description,
               "max_abs": version.spec["max_abs"], "max_rel": version.spec["max_rel"],
               "based_on": version.number}  # fmt: skip
    return {
        "section": "operators",
        "operator": operator,
        "version": version,
        "spec": version.spec,
        "cases": version.cases.all(),
        "kernels": version.starting_kernels.all(),
        "versions": versions,
        "newest": newest,
        "editable": editable,
        "edit_form": form or (VersionEditForm(initial=initial) if editable else None),
        "kernel_form": kernel_form or kernel_form_for(version, membership),
    }


def kernel_form_for(version: OperatorVersion, membership: Membership) -> KernelEvaluateForm | None:
    """The "Evaluate a kernel" form, for those who may launch sessions."""
    if not membership.allows(Permission.RUN):
        return None
    return KernelEvaluateForm(initial={"version": version.number})


@require_POST
@team_view(Permission.RUN)
def operator_edit(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    operator = selectors.operator_get(membership.team, slug)
    if operator.team_id != membership.team.pk:
        raise DomainError(f"{slug} is shared by every team; it cannot be edited from one team.")
    version = selectors.version_get(operator)
    form = VersionEditForm(request.POST)
    if not form.is_valid():
        context = operator_context(version, membership, form)
        return render(request, "operators/operator_detail.html", context, status=400)
    try:
        edited, created = version_edit(version=version, user=request.user, **form.cleaned_data)  # type: ignore[arg-type]
    except Conflict as conflict:
        return edit_made_to_an_older_version(request, membership, operator, conflict)
    if created:
        messages.success(request, f"Saved as version {edited.number}.")
    else:
        messages.info(request, "Nothing changed; no new version.")
    url = reverse("operator", kwargs={"team": membership.team.slug, "slug": slug})
    return redirect(f"{url}?v={edited.number}")


def edit_made_to_an_older_version(
    request: HttpRequest, membership: Membership, operator: Operator, conflict: Conflict
) -> HttpResponse:
    """The newest version's page with the editor's changes kept in the form and why they were
    not saved: saving again saves them over the newest version, now that it has been seen."""
    version = selectors.version_get(operator)
    form = VersionEditForm({**request.POST.dict(), "based_on": version.number})
    form.is_valid()
    form.add_error(None, conflict.message)
    context = operator_context(version, membership, form)
    return render(request, "operators/operator_detail.html", context, status=409)


@team_view()
def suite_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    context = {"section": "operators", "suites": selectors.suites_listed_for(membership.team)}
    return render(request, "operators/suite_list.html", context)


@team_view()
def suite_detail(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    suite = selectors.suite_get(membership.team, slug)
    operators = [entry.operator for entry in suite.entries.select_related("operator")]
    versions = {
        v.operator_id: v
        for v in selectors.latest_versions(selectors.operators_visible_to(membership.team))
    }
    rows = [(position, versions.get(op.pk), op) for position, op in enumerate(operators, start=1)]
    return render(
        request,
        "operators/suite_detail.html",
        {"section": "operators", "suite": suite, "rows": rows},
    )


@team_view()
def import_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = ImportForm() if membership.allows(Permission.RUN) else None
    context = import_list_context(request, membership, form)
    return render(request, "operators/import_list.html", context)


def import_list_context(
    request: HttpRequest, membership: Membership, form: ImportForm | None
) -> dict[str, object]:
    page = page_of(request, selectors.imports_for(membership.team).order_by("-created_at", "-pk"))
    return {"section": "operators", "form": form, "imports": page, "page": page,
            "archive_limits": Limits.from_settings()}  # fmt: skip


@require_POST
@team_view(Permission.RUN)
def import_create(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = ImportForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            run = import_from_form(form, membership, request.user)  # type: ignore[arg-type]
        except ImportRequestError as error:
            form.add_error(error.field, error.message)
        else:
            import_enqueue(run)
            return redirect("import-detail", team=membership.team.slug, import_id=run.pk)
    context = import_list_context(request, membership, form)
    return render(request, "operators/import_list.html", context, status=400)


def import_from_form(form: ImportForm, membership: Membership, user: User) -> ImportRun:
    values = form.cleaned_data
    request = {"fmt": values["format"] or None, "scale": values["scale"],
               "team": membership.team, "user": user}  # fmt: skip
    archive = values["archive"]
    if archive is None:
        return import_start(path=values["path"], **request)
    return import_start_from_archive(archive=archive, name=archive.name or "archive",
                                     size=archive.size, **request)  # fmt: skip


@team_view()
def import_detail(request: HttpRequest, membership: Membership, import_id: int) -> HttpResponse:
    run = selectors.import_get(membership.team, import_id)
    context = {"section": "operators", "run": run, "counts": summary(run)}
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, "operators/import_detail.html#progress", context)
    return render(request, "operators/import_detail.html", context)
