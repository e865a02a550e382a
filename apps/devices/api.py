from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.http import HttpRequest
from kombu.exceptions import OperationalError as BrokerUnreachable
from ninja import Router, Schema, Status

from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import Unavailable
from apps.devices.workers import known_queues, worker_check_start, workers_online

router = Router(tags=["workers"])
Answer = TypeVar("Answer")
BROKER_DOWN = ("The broker (Redis) is not answering: no worker can be asked and no check sent. "
               "The workers reconnect on their own once it is back; try again then.")  # fmt: skip


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
    return {"queues": known_queues(), "workers": from_the_broker(workers_online)}


@router.post("/teams/{slug}/workers/check", response={202: CheckOut})
def check_workers(request: HttpRequest, slug: str) -> Any:
    membership = membership_for(request.user, slug, Permission.RUN)
    check_id = from_the_broker(lambda: worker_check_start(team=membership.team))
    return Status(202, {"check_id": check_id, "queues": known_queues()})


def from_the_broker(ask: Callable[[], Answer]) -> Answer:
    """What `ask` gets from the broker; a 503 saying so, rather than a 500, while it is away."""
    try:
        return ask()
    except BrokerUnreachable:
        raise Unavailable(BROKER_DOWN, code="broker_unavailable") from None
