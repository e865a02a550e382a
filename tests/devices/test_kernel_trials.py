"""A member's own kernel evaluated from an operator's page: who may send one, what is refused
with what reason, who may see its verdict, and its socket, which sends the state on connect
and again on each status change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.consumers import TrialConsumer
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation, KernelTrial
from apps.devices.services import claim_attempt, evaluation_request, kernel_trial_start
from apps.operators.builtin_suite import BUILTIN_DIR
from apps.operators.models import OperatorVersion
from tests.factories import MembershipFactory, TeamFactory, stored_builtin

RELU_KERNEL = (BUILTIN_DIR / "relu" / "naive.c").read_text()
PAGE = "/t/kernels/operators/relu/"


@pytest.fixture
def relu(db: None) -> OperatorVersion:
    return stored_builtin("relu")


def evaluate(client: Client, **fields: Any) -> Any:
    return client.post(f"{PAGE}evaluations/new/", {"version": 1, **fields})


def form_errors(page: Any, field: str) -> str:
    text = page.content.decode()
    errors = text[text.index(f'id="id_{field}_error"') :]
    return errors[: errors.index("</ul>")]


def test_an_engineer_pastes_a_kernel_and_is_taken_to_its_queued_evaluation(
    relu: OperatorVersion, client_for: Callable[[Role | str], Client]
) -> None:
    client = client_for(Role.ENGINEER)

    sent = evaluate(client, source=RELU_KERNEL)

    trial = KernelTrial.objects.get()
    assert sent.status_code == 302 and sent.url == f"{PAGE}evaluations/{trial.pk}/"
    assert (trial.name, trial.evaluation.version, trial.evaluation.status) == (
        "pasted", relu, Evaluation.Status.QUEUED)  # fmt: skip
    assert trial.evaluation.source.text == RELU_KERNEL
    page = client.get(sent.url)
    assert 'id="trial-status"' in page.content.decode() and "queued" in page.content.decode()


def test_an_uploaded_file_is_evaluated_under_its_name(
    relu: OperatorVersion, client_for: Callable[[Role | str], Client]
) -> None:
    upload = SimpleUploadedFile("mine.c", RELU_KERNEL.encode())
    evaluate(client_for(Role.ENGINEER), upload=upload)
    assert KernelTrial.objects.get().name == "mine.c"


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"source": "  \n"}, "source", "Paste a kernel or choose a file to upload."),
        ({"upload": SimpleUploadedFile("k.c", b"int \xff;")}, "upload", "k.c is not UTF-8 text"),
        ({"upload": SimpleUploadedFile("k.c", b"a\x00b")}, "upload", "k.c holds a NUL character"),
        ({"upload": SimpleUploadedFile("k.c", b"\n")}, "upload", "k.c is empty: no kernel"),
        ({"upload": SimpleUploadedFile("big.c", b"x" * 1_000_001)}, "upload",
         "big.c is 1000001 bytes; the limit is 1000000."),
        ({"source": "int x;", "upload": SimpleUploadedFile("k.c", b"int y;")}, "upload",
         "Paste a kernel or upload a file, not both."),
    ],
)  # fmt: skip
def test_a_kernel_that_cannot_be_evaluated_is_refused_under_its_field(
    relu: OperatorVersion, client_for: Callable[[Role | str], Client], fields: dict[str, Any],
    field: str, reason: str,
) -> None:  # fmt: skip
    page = evaluate(client_for(Role.ENGINEER), **fields)

    assert page.status_code == 400
    assert reason in form_errors(page, field)
    assert not KernelTrial.objects.exists() and not Evaluation.objects.exists()


def test_a_viewer_sees_no_form_and_may_not_send_a_kernel(
    relu: OperatorVersion, client_for: Callable[[Role | str], Client]
) -> None:
    viewer = client_for(Role.VIEWER)
    assert 'name="source"' not in viewer.get(PAGE).content.decode()
    assert 'name="source"' in client_for(Role.ENGINEER).get(PAGE).content.decode()
    assert evaluate(viewer, source=RELU_KERNEL).status_code == 403
    assert not KernelTrial.objects.exists()


def test_another_team_does_not_see_a_trial_even_of_the_same_shared_evaluation(
    relu: OperatorVersion, team: Team, other_team: Team, member: Callable[[Role | str], User]
) -> None:
    ours = kernel_trial_start(team=team, user=member(Role.ENGINEER), version=relu,
                              source_text=RELU_KERNEL, name="ours.c")  # fmt: skip
    outsider = MembershipFactory(team=other_team, role=Role.ENGINEER).user
    theirs = kernel_trial_start(team=other_team, user=outsider, version=relu,
                                source_text=RELU_KERNEL, name="theirs.c")  # fmt: skip
    assert ours.evaluation == theirs.evaluation  # one kernel, evaluated once
    client = Client()
    client.force_login(outsider)

    assert client.get(f"/t/elsewhere/operators/relu/evaluations/{theirs.pk}/").status_code == 200
    assert client.get(f"/t/elsewhere/operators/relu/evaluations/{ours.pk}/").status_code == 404
    listed = client.get("/t/elsewhere/operators/relu/evaluations/").content.decode()
    assert "theirs.c" in listed and "ours.c" not in listed


def socket_for(trial: KernelTrial, user: Any) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(TrialConsumer.as_asgi(), f"/ws/trials/{trial.pk}/")
    socket.scope["user"] = user
    socket.scope["url_route"] = {"kwargs": {"trial_id": trial.pk}}
    return socket


def test_the_socket_sends_the_state_on_connect_and_again_when_the_status_changes(
    transactional_db: None,
) -> None:
    relu = stored_builtin("relu")
    engineer = MembershipFactory(team=TeamFactory(slug="kernels"), role=Role.ENGINEER)
    trial = kernel_trial_start(team=engineer.team, user=engineer.user, version=relu,
                               source_text=RELU_KERNEL, name="mine.c")  # fmt: skip

    async def watch() -> list[str]:
        socket = socket_for(trial, engineer.user)
        connected, _ = await socket.connect()
        assert connected
        seen = [await socket.receive_from(timeout=10)]
        await sync_to_async(claim_attempt)(trial.evaluation_id, 2, "device@test")
        seen.append(await socket.receive_from(timeout=10))
        await socket.disconnect()
        return seen

    on_connect, on_claim = async_to_sync(watch)()

    assert 'hx-swap-oob="innerHTML"' in on_connect and ">queued</strong>" in on_connect
    assert ">running</strong> on device@test" in on_claim


def test_the_socket_closes_out_whoever_is_not_in_the_trials_team(
    transactional_db: None,
) -> None:
    relu = stored_builtin("relu")
    engineer = MembershipFactory(role=Role.ENGINEER)
    trial = kernel_trial_start(team=engineer.team, user=engineer.user, version=relu,
                               source_text=RELU_KERNEL, name="mine.c")  # fmt: skip
    outsider = MembershipFactory(role=Role.ADMIN).user

    async def knock() -> Any:
        socket = socket_for(trial, outsider)
        await socket.connect()
        return await socket.receive_output(timeout=10)

    assert async_to_sync(knock)() == {"type": "websocket.close", "code": 4403}


def test_a_stored_verdict_is_shown_at_once_for_a_kernel_evaluated_before(
    relu: OperatorVersion, team: Team, member: Callable[[Role | str], User]
) -> None:
    evaluation, _ = evaluation_request(version=relu, source_text=RELU_KERNEL,
                                       options=EvalSettings.from_settings())  # fmt: skip
    Evaluation.objects.filter(pk=evaluation.pk).update(status="done", verdict={
        "status": "correct", "environment": {"compiler": "gcc", "cpu_model": "cpu", "threads": 1,
                                             "flags": ["-O2"]}})  # fmt: skip

    trial = kernel_trial_start(team=team, user=member(Role.ENGINEER), version=relu,
                               source_text=RELU_KERNEL, name="again.c")  # fmt: skip

    assert trial.evaluation_id == evaluation.pk
    client = Client()
    client.force_login(trial.created_by)  # type: ignore[arg-type]
    page = client.get(f"{PAGE}evaluations/{trial.pk}/").content.decode()
    assert '<strong id="trial-verdict">CORRECT</strong>' in page and "verdict: CORRECT" in page
