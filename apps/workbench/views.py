from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from kombu.exceptions import OperationalError as BrokerUnreachable

from apps.accounts.access import team_view
from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.accounts.selectors import memberships_for_user
from apps.devices.targets import TARGETS
from apps.devices.workers import known_queues, worker_check_start, workers_online

logger = logging.getLogger(__name__)

# The sections a team has; each page says what it will hold and what to do to fill it.
SECTIONS: dict[str, str] = {}


def home(request: HttpRequest) -> HttpResponse:
    first = memberships_for_user(request.user).first()
    if first is None:
        return render(request, "workbench/no_team.html")
    return redirect("sessions", team=first.team.slug)


@team_view()
def section(request: HttpRequest, membership: Membership, section: str) -> HttpResponse:
    from django.http import Http404

    if section not in SECTIONS:
        raise Http404(f"No section {section!r}.")
    context = {"section": section, "title": SECTIONS[section]}
    return render(request, f"workbench/{section}.html", context)


@team_view()
def workers(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The page at once, its list of workers saying "asking…": the broadcast ping waits up to
    KOPE_WORKER_PING_TIMEOUT_MS, so the browser asks for the list (`?part=list`) once the
    page is up. Without JavaScript, `?ask=now` renders the page with the list in it."""
    part = request.GET.get("part")
    context = workers_context() | {"can_check": membership.allows(Permission.RUN)}
    if part != "list" and request.GET.get("ask") != "now":
        return render(request, "workbench/workers.html", context)
    try:
        online = workers_online()
    except BrokerUnreachable:
        return broker_down(request)
    template = "workbench/workers.html#list" if part == "list" else "workbench/workers.html"
    return render(request, template, context | {"asked": True, "workers": online})


@require_POST
@team_view(Permission.RUN)
def workers_check(request: HttpRequest, membership: Membership) -> HttpResponse:
    try:
        check_id = worker_check_start(team=membership.team)
    except BrokerUnreachable:
        return broker_down(request)
    queues = known_queues()
    if request.htmx:  # type: ignore[attr-defined]
        context = {"check_id": check_id, "queues": queues}
        return render(request, "workbench/workers.html#check-started", context)
    messages.info(request, f"Check {check_id} sent to {', '.join(queues)}; its answers show on "
                           "this page live, with JavaScript on.")  # fmt: skip
    return redirect("workers", team=membership.team.slug)


def workers_context() -> dict[str, object]:
    return {"section": "workers", "queue_targets": queue_targets(),
            "ping_ms": round(settings.WORKER_PING_TIMEOUT_S * 1000)}  # fmt: skip


def queue_targets() -> dict[str, list[str]]:
    """Each queue this deployment uses, with the targets whose evaluations it carries (the
    queue is not named after the target: triton's and cuda's are both device.cuda)."""
    return {queue: [target.name for target in TARGETS.values() if target.queue == queue]
            for queue in known_queues()}  # fmt: skip


def broker_down(request: HttpRequest) -> HttpResponse:
    """Redis away: the page says so (503) rather than a 500. htmx swaps in only a 2xx answer,
    so the check's status line gets the same words with a 200."""
    logger.warning("the Workers page could not reach the broker", exc_info=True)
    context = workers_context() | {"broker_down": True}
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, "workbench/workers.html#broker-down", context)
    return render(request, "workbench/workers.html", context, status=503)
