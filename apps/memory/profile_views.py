"""A profile's own page: the timed calls laid end to end and each function's costs, drawn in
the page (Perfetto shows the same from the Chrome Trace JSON export), and the costliest
kernel lines. The tables are the page without JavaScript."""

from __future__ import annotations

import json

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.memory.models import Case
from apps.memory.profiles import call_samples_ms, function_costs, top_lines
from apps.memory.selectors import team_profile


@team_view()
def profile_page(request: HttpRequest, membership: Membership, profile_id: int) -> HttpResponse:
    profile = team_profile(membership.team, profile_id)
    if profile is None:
        raise Http404(f"No profile {profile_id}.")
    functions = function_costs(profile.data)
    samples = call_samples_ms(profile.trace)
    evaluation = profile.evaluation
    cases = Case.objects.filter(session__team=membership.team, source_id=evaluation.source_id,
                                version_id=evaluation.version_id).order_by("pk")[:5]  # fmt: skip
    context = {
        "section": "forest", "profile": profile, "evaluation": evaluation, "cases": cases,
        "operator": evaluation.version.operator.slug, "functions": functions,
        "lines": top_lines(profile.data), "samples_ms": samples,
        "chart": {"samples_ms": samples, "label": f"profile #{profile.pk}",
                  "functions": [{"function": row["function"], "ir": row["ir"],
                                 "in_kernel": row["in_kernel"]} for row in functions]},
    }  # fmt: skip
    return render(request, "memory/profile.html", context)


@team_view()
def profile_trace(request: HttpRequest, membership: Membership, profile_id: int) -> HttpResponse:
    """A profile as Chrome Trace JSON (opens in Perfetto and chrome://tracing)."""
    profile = team_profile(membership.team, profile_id)
    if profile is None:
        raise Http404(f"No profile {profile_id}.")
    response = HttpResponse(json.dumps(profile.trace), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="kope-profile-{profile.pk}.json"'
    return response
