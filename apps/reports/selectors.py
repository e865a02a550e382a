from __future__ import annotations

from django.db.models import QuerySet

from apps.accounts.models import Team
from apps.reports.models import Export
from apps.runs.models import OptimizationSession

SESSION_CHOICES = 200


def team_exports(team: Team, *, with_content: bool = False) -> QuerySet[Export]:
    exports = Export.objects.filter(team=team).select_related("created_by")
    return exports if with_content else exports.defer("content")


def session_choices(team: Team) -> list[tuple[int, str]]:
    """The team's latest sessions as form choices: "#12 label (suite, memory mode, status)"."""
    sessions = OptimizationSession.objects.filter(team=team).order_by("-created_at")
    choices = []
    for s in sessions[:SESSION_CHOICES]:
        suite = (s.config or {}).get("suite") or {}
        what = suite.get("slug") or ", ".join(e["slug"] for e in s.config.get("operators", []))
        name = f"#{s.pk} {s.label or what[:60]} ({s.memory_mode}, {s.status})"
        choices.append((s.pk, name))
    return choices
