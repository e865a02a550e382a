"""Operators, suites and imports over HTTP, scoped and permitted exactly as the pages are.

No `from __future__ import annotations` here: ninja reads the parameter annotations of
@paginate-wrapped views at run time, where string annotations cannot be resolved.
"""

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate
from pydantic import ConfigDict

from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import DomainError
from apps.core.numbers import RealNumber, WholeNumber
from apps.core.pagination import LimitOffset
from apps.operators import selectors
from apps.operators.importing import import_enqueue, import_start, summary
from apps.operators.models import ImportRun, OperatorVersion, Suite
from apps.operators.services import version_edit
from apps.operators.spec import FAMILIES

router = Router(tags=["operators"])

Family = Literal[FAMILIES]  # type: ignore[valid-type]
Level = Literal[1, 2, 3]


class OperatorSummaryOut(Schema):
    slug: str
    name: str
    family: str
    level: int
    version: int
    cases: int
    origin: str
    shared: bool


class OperatorCaseOut(Schema):
    case_id: str
    params: dict[str, Any]
    dtype: str
    timing: bool
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    unsupported_targets: list[str]


class OperatorOut(OperatorSummaryOut):
    description: str
    spec: dict[str, Any]
    reference_kind: str
    reference_source: dict[str, Any]
    starting_kernels: dict[str, str]
    case_list: list[OperatorCaseOut]
    versions: list[int]
    scale: float
    origin_path: str
    created_at: datetime


class OperatorEditIn(Schema):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is a 422, not an edit of nothing

    name: str | None = Field(None, max_length=200)
    description: str | None = Field(None, max_length=20_000)
    max_abs: RealNumber | None = Field(None, gt=0)
    max_rel: RealNumber | None = Field(None, gt=0)
    starting_kernels: dict[str, str | None] | None = Field(
        None, description="target -> source: the targets named get this starting kernel (null "
        "removes theirs); the others keep theirs",
    )  # fmt: skip
    based_on: WholeNumber | None = Field(
        None, ge=1, description="the version number the edit was made from: when another "
        "version was saved since, 409 and nothing is saved",
    )  # fmt: skip


class SuiteOut(Schema):
    slug: str
    name: str
    description: str
    shared: bool
    operators: list[str]


class ImportIn(Schema):
    model_config = ConfigDict(extra="forbid")  # {"Scale": 0.1} imported at scale 1

    path: str = Field(..., max_length=500)
    format: str | None = Field(None, description="kernelbench or npukernelbench; default: detect")
    scale: RealNumber = Field(1.0, gt=0, le=1)


class ImportOut(Schema):
    id: int
    path: str
    format: str
    scale: float
    status: str
    total: int
    done: int
    counts: dict[str, int]
    report: list[dict[str, Any]]
    error: str
    created_at: datetime
    finished_at: datetime | None


def summary_out(version: OperatorVersion) -> dict[str, Any]:
    count = getattr(version, "case_count", None)
    return {
        "slug": version.operator.slug, "name": version.name, "family": version.operator.family,
        "level": version.level, "version": version.number, "origin": version.origin,
        "cases": count if count is not None else version.cases.count(),
        "shared": version.operator.team_id is None,
    }  # fmt: skip


def operator_out(version: OperatorVersion) -> dict[str, Any]:
    return {
        **summary_out(version),
        "description": version.description, "spec": version.spec,
        "reference_kind": version.reference_kind, "reference_source": version.reference_source,
        "starting_kernels": {k.target: k.source for k in version.starting_kernels.all()},
        "case_list": list(version.cases.all()),
        "versions": sorted(version.operator.versions.values_list("number", flat=True)),
        "scale": version.scale, "origin_path": version.origin_path,
        "created_at": version.created_at,
    }  # fmt: skip


def suite_out(suite: Suite) -> dict[str, Any]:
    return {
        "slug": suite.slug, "name": suite.name, "description": suite.description,
        "shared": suite.team_id is None,
        "operators": [e.operator.slug for e in suite.entries.select_related("operator")],
    }  # fmt: skip


def import_out(run: ImportRun) -> dict[str, Any]:
    fields = ["id", "path", "format", "scale", "status", "total", "done", "report", "error",
              "created_at", "finished_at"]  # fmt: skip
    return {**{f: getattr(run, f) for f in fields}, "counts": summary(run)}


@router.get("/teams/{slug}/operators", response=list[OperatorSummaryOut])
@paginate(LimitOffset)
def list_operators(
    request: HttpRequest, slug: str, family: Family | None = None, level: Level | None = None
) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    operators = selectors.operators_listed_for(team)
    versions = selectors.latest_versions(operators, family=family, level=level)
    return [summary_out(v) for v in versions]


@router.get("/teams/{slug}/operators/{operator}", response=OperatorOut)
def get_operator(request: HttpRequest, slug: str, operator: str, version: int | None = None) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    found = selectors.operator_get(team, operator)
    return operator_out(selectors.version_get(found, version))


@router.patch("/teams/{slug}/operators/{operator}", response={200: OperatorOut, 201: OperatorOut})
def edit_operator(request: HttpRequest, slug: str, operator: str, payload: OperatorEditIn) -> Any:
    """Edit the newest version: a new version when anything changed (201), else the same (200)."""
    membership = membership_for(request.user, slug, Permission.RUN)
    found = selectors.operator_get(membership.team, operator)
    if found.team_id != membership.team.pk:
        raise DomainError(f"{operator} is shared by every team; it cannot be edited from one team.")
    changes = payload.dict(exclude_unset=True)
    edited, created = version_edit(
        version=selectors.version_get(found),
        user=request.user,  # type: ignore[arg-type]
        **changes,
    )
    return Status(201 if created else 200, operator_out(edited))


@router.get("/teams/{slug}/suites", response=list[SuiteOut])
@paginate(LimitOffset)
def list_suites(request: HttpRequest, slug: str) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    return [suite_out(s) for s in selectors.suites_listed_for(team)]


@router.get("/teams/{slug}/suites/{suite}", response=SuiteOut)
def get_suite(request: HttpRequest, slug: str, suite: str) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    return suite_out(selectors.suite_get(team, suite))


@router.post("/teams/{slug}/imports", response={202: ImportOut})
def create_import(request: HttpRequest, slug: str, payload: ImportIn) -> Any:
    """Import a folder already on the server (under KOPE_IMPORT_ROOTS); a worker does the work."""
    membership = membership_for(request.user, slug, Permission.RUN)
    run = import_start(path=payload.path, fmt=payload.format, scale=payload.scale,
                       team=membership.team, user=request.user)  # type: ignore[arg-type]  # fmt: skip
    import_enqueue(run)
    return Status(202, import_out(run))


@router.get("/teams/{slug}/imports", response=list[ImportOut])
@paginate(LimitOffset)
def list_imports(request: HttpRequest, slug: str) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    return [import_out(r) for r in selectors.imports_for(team)]


@router.get("/teams/{slug}/imports/{import_id}", response=ImportOut)
def get_import(request: HttpRequest, slug: str, import_id: int) -> Any:
    team = membership_for(request.user, slug, Permission.VIEW).team
    return import_out(selectors.import_get(team, import_id))
