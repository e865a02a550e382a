from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status

from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.devices.workers import known_queues, worker_check_start, workers_online

router = Router(tags=["workers"])


class WorkerOut(Schema):
    name: str
    queues: list[str]
    active_tasks: int


class WorkersOut(Schema):
    queues: list[str]
    workers: list[WorkerOut]


class CheckOut(Schema):
    check_id: str
    queues: list[str]


@router.get("/teams/{slug}/workers", response=WorkersOut)
def list_workers(request: HttpRequest, slug: str) -> Any:
    membership_for(request.user, slug, Permission.VIEW)
    return {"queues": known_queues(), "workers": workers_online()}


@router.post("/teams/{slug}/workers/check", response={202: CheckOut})
def check_workers(request: HttpRequest, slug: str) -> Any:
    membership = membership_for(request.user, slug, Permission.RUN)
    check_id = worker_check_start(team=membership.team)
    return Status(202, {"check_id": check_id, "queues": known_queues()})
