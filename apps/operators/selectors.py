"""Reading operators and suites as a team sees them: shared ones (no team) plus its own."""

from __future__ import annotations

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from apps.accounts.models import Team
from apps.core.errors import NotFound
from apps.operators.models import ImportRun, Operator, OperatorVersion, Suite


def _visible(team: Team | None) -> Q:
    return Q(team__isnull=True) | Q(team=team) if team is not None else Q(team__isnull=True)


def operators_visible_to(team: Team | None) -> QuerySet[Operator]:
    return Operator.objects.filter(_visible(team))


def operators_listed_for(team: Team) -> QuerySet[Operator]:
    """What the team's lists show: a shared operator of a slug the team has its own of is
    left out, as its slug leads to the team's own (operator_get)."""
    own = Operator.objects.filter(team=team).values("slug")
    return operators_visible_to(team).exclude(team__isnull=True, slug__in=own)


def latest_versions(
    operators: QuerySet[Operator], *, family: str | None = None, level: int | None = None
) -> list[OperatorVersion]:
    """The newest version of each operator, easy first (level, then name)."""
    newest = OperatorVersion.objects.filter(operator=OuterRef("operator")).order_by("-number")
    versions = (
        OperatorVersion.objects.filter(operator__in=operators)
        .filter(pk=Subquery(newest.values("pk")[:1]))
        .select_related("operator", "operator__team")
        .annotate(case_count=Count("cases"))
        .order_by("level", "operator__slug")
    )
    if family:
        versions = versions.filter(operator__family=family)
    if level:
        versions = versions.filter(level=level)
    return list(versions)


def operator_get(team: Team | None, slug: str) -> Operator:
    """The team's own operator of that slug, else the shared one; another team's is NotFound."""
    found = sorted(operators_visible_to(team).filter(slug=slug), key=lambda o: o.team_id is None)
    if not found:
        raise NotFound(f"No operator {slug!r}.")
    return found[0]


def version_get(operator: Operator, number: int | None = None) -> OperatorVersion:
    versions = operator.versions.all()
    version = (
        versions.order_by("-number").first()
        if number is None
        else versions.filter(number=number).first()
    )
    if version is None:
        raise NotFound(f"No version {number} of {operator.slug}.")
    return version


def suites_visible_to(team: Team | None) -> QuerySet[Suite]:
    return Suite.objects.filter(_visible(team)).annotate(size=Count("entries")).order_by("name")


def suites_listed_for(team: Team) -> QuerySet[Suite]:
    """As operators_listed_for: a shared suite a team's own of the same slug hides is left out."""
    own = Suite.objects.filter(team=team).values("slug")
    return suites_visible_to(team).exclude(team__isnull=True, slug__in=own)


def suite_get(team: Team | None, slug: str) -> Suite:
    found = sorted(suites_visible_to(team).filter(slug=slug), key=lambda s: s.team_id is None)
    if not found:
        raise NotFound(f"No suite {slug!r}.")
    return found[0]


def imports_for(team: Team) -> QuerySet[ImportRun]:
    return ImportRun.objects.filter(team=team).select_related("created_by")


def import_get(team: Team, import_id: int) -> ImportRun:
    run = imports_for(team).filter(pk=import_id).first()
    if run is None:
        raise NotFound(f"No import {import_id}.")
    return run
