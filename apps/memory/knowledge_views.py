"""The knowledge base and hot memory pages.

A search is a GET form: the query and filters are the URL, so a search can be shared and the
page works without JavaScript; with it, htmx swaps in the results fragment and pushes the URL.
Embedding the query is the one embedding a web request does (one short text, about 15 ms once
the model is loaded in the web process).
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.vary import vary_on_headers

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.memory.coldstart.vectors import document_origin
from apps.memory.hot import hot_memory_budget, hot_memory_standings
from apps.memory.knowledge import (
    KINDS,
    OUTCOMES,
    RESULT_LIMIT,
    STATUSES,
    Filters,
    Result,
    knowledge_operators,
    knowledge_search,
    knowledge_targets,
    team_document,
)
from apps.memory.models import HotMemoryChange

CHANGES_SHOWN = 100


# The fragment and the page share a URL: a cache must never serve one for the other.
@vary_on_headers("HX-Request")
@team_view()
def knowledge_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    team = membership.team
    filters = Filters.from_query(request.GET)
    results = knowledge_search(team, filters)
    for result in results:
        result.origin = document_origin(result.key) if result.kind == "document" else None
    context = {
        "section": "knowledge", "filters": filters, "results": results,
        "limit": RESULT_LIMIT, "kinds": KINDS, "outcomes": OUTCOMES, "statuses": STATUSES,
        "operators": knowledge_operators(team), "targets": knowledge_targets(team),
    }  # fmt: skip
    template = "memory/knowledge.html"
    htmx = request.htmx  # type: ignore[attr-defined]
    if htmx and not htmx.history_restore_request:
        template += "#results"
    return render(request, template, context)


@team_view()
def document_page(request: HttpRequest, membership: Membership, key: str) -> HttpResponse:
    document = team_document(membership.team, key)
    if document is None:
        raise Http404(f"No document {key!r}.")
    title = Result(document.key, document.kind, document.text, None, "", "", None).title
    context = {"section": "knowledge", "document": document, "title": title,
               "origin": document_origin(document.key)}  # fmt: skip
    return render(request, "memory/document.html", context)


@team_view()
def hot_memory_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    team = membership.team
    standings = hot_memory_standings(team)
    change = request.GET.get("change", "")
    if change not in HotMemoryChange.Change.values:
        change = ""
    changes = HotMemoryChange.objects.filter(team=team).select_related("rule")
    if change:
        changes = changes.filter(change=change)
    budget = hot_memory_budget()
    used = sum(s.tokens for s in standings if s.resident)
    context = {
        "section": "hot-memory", "budget": budget, "used": used,
        "residents": [s for s in standings if s.resident],
        "waiting": [s for s in standings if not s.resident],
        "change": change, "changes": changes[:CHANGES_SHOWN], "changes_shown": CHANGES_SHOWN,
    }  # fmt: skip
    return render(request, "memory/hot_memory.html", context)
