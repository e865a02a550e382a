"""Bad input to the session socket and the launch form: a clear answer naming what was wrong,
never a crashed consumer or a misleading message."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.core.errors import DomainError
from apps.memory.journal import journal_append
from apps.runs.consumers import SessionEventsConsumer
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create, session_rerun
from tests.factories import MembershipFactory, stored_builtin

LAUNCH = {"policy": "offline", "memory_mode": "off", "rounds": "4", "plateau": "2",
          "repeats": "20", "seed": "0"}  # fmt: skip


@pytest.mark.parametrize("after", ["9" * 5000, str(2**63), str(10**30)])
def test_a_socket_asking_after_a_seq_no_journal_can_hold_gets_the_journal_from_the_start(
    transactional_db: None, after: str
) -> None:
    stored_builtin("relu")
    member = MembershipFactory(role=Role.VIEWER)
    session = session_create(team=member.team, user=None, operators=["relu"], start=False)
    for text in ("one", "two"):
        journal_append(session_id=session.pk, kind="session_note", payload={"text": text})

    async def watch() -> list[int]:
        socket = WebsocketCommunicator(SessionEventsConsumer.as_asgi(),
                                       f"/ws/sessions/{session.pk}/?after={after}")  # fmt: skip
        socket.scope["user"] = member.user
        socket.scope["url_route"] = {"kwargs": {"session_id": session.pk}}
        connected, _ = await socket.connect(timeout=10)
        assert connected
        seen = [json.loads(await socket.receive_from(timeout=10))["seq"] for _ in range(2)]
        await socket.disconnect()
        return seen

    assert async_to_sync(watch)() == [1, 2]


@pytest.mark.parametrize(
    ("field", "choice"), [("operators", ["no-such-operator"]), ("suite", "no-such-suite")]
)
def test_the_launch_form_names_only_the_unknown_choice(
    team: Team, client_for: Callable[[Role], Client], field: str, choice: object
) -> None:
    stored_builtin("relu")

    response = client_for(Role.ENGINEER).post(
        f"/t/{team.slug}/sessions/new/", {**LAUNCH, field: choice}
    )

    errors = response.context["form"].errors
    assert response.status_code == 400
    assert list(errors) == [field]
    assert "no-such-" in errors[field][0]
    assert "(one of the two)" not in response.content.decode()
    assert not OptimizationSession.objects.exists()


def test_a_claude_session_is_not_rerun_once_the_api_key_is_gone(team: Team, settings: Any) -> None:
    """The re-run used to be created anyway, a session that could only fail later."""
    stored_builtin("relu")
    settings.ANTHROPIC_API_KEY = "sk-test"
    session = session_create(team=team, user=None, operators=["relu"], policy="claude",
                             start=False)  # fmt: skip
    settings.ANTHROPIC_API_KEY = ""
    with pytest.raises(DomainError, match="the Claude policy needs ANTHROPIC_API_KEY"):
        session_rerun(session=session, user=None)
    assert OptimizationSession.objects.count() == 1


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"offline_prior": "wise"}, "offline prior 'wise' is not one of written-in, blank"),
        ({"memory_scope": "everyone"}, "memory scope 'everyone' is not one of team, other-famil"),
        ({"offline_prior": "blank", "policy": "claude"}, "only the offline policy has a prior"),
    ],
)
def test_an_unknown_prior_or_memory_scope_is_named_and_nothing_is_made(
    team: Team, settings: Any, choice: dict[str, str], message: str
) -> None:
    stored_builtin("relu")
    settings.ANTHROPIC_API_KEY = "sk-test"
    with pytest.raises(DomainError, match=message):
        session_create(team=team, user=None, operators=["relu"], start=False, **choice)
    assert not OptimizationSession.objects.exists()
