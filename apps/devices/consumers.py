"""An evaluated kernel's page, live: its status and verdict as HTML for htmx's ws extension.

The client connects to /ws/trials/<id>/. The consumer joins the evaluation's group, then sends
the trial's state as it is now (what changed between the page's rendering and the connection
is not missed), and again on each status change the evaluation announces."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from django.template.loader import render_to_string

from apps.core.consumers import CLOSE_FORBIDDEN, MembersOnlyConsumer, refuse
from apps.core.events import evaluation_group
from apps.devices.selectors import trial_of_member
from apps.devices.views import trial_context  # the page's own context: one way to show it

STATE_TEMPLATE = "devices/trial_detail.html#state"


@database_sync_to_async  # type: ignore[untyped-decorator]
def trial_evaluation(user_id: int | None, trial_id: int) -> int | None:
    """The trial's evaluation, when the user may watch it (an active member of its team)."""
    if user_id is None:
        return None
    trial = trial_of_member(user_id, trial_id)
    return trial.evaluation_id if trial is not None else None


@database_sync_to_async  # type: ignore[untyped-decorator]
def trial_state_html(user_id: int | None, trial_id: int) -> str | None:
    trial = trial_of_member(user_id, trial_id) if user_id is not None else None
    if trial is None:
        return None
    return render_to_string(STATE_TEMPLATE, {**trial_context(trial), "swap_oob": True})


class TrialConsumer(MembersOnlyConsumer):
    trial_id = 0

    async def connect(self) -> None:
        self.trial_id = int(self.scope["url_route"]["kwargs"]["trial_id"])
        evaluation_id = await trial_evaluation(self.user_id, self.trial_id)
        if evaluation_id is None:
            await refuse(self, CLOSE_FORBIDDEN)
            return
        self.group = evaluation_group(evaluation_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_state()

    async def evaluation_status(self, message: dict[str, Any]) -> None:
        if await self.still_allowed():
            await self.send_state()

    async def may_see(self) -> bool:
        return await trial_evaluation(self.user_id, self.trial_id) is not None

    async def send_state(self) -> None:
        html = await trial_state_html(self.user_id, self.trial_id)
        if html is not None:
            await self.send(text_data=html)
