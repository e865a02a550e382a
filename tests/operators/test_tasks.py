"""An import whose message the broker refuses: the run is committed before the message is
sent, so it must end failed with the reason, not answer 500 and stay 'running' for ever."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from django.test import Client
from django.utils.html import escape
from kombu.exceptions import OperationalError as BrokerDown

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.models import ImportRun
from apps.operators.tasks import import_folder
from tests.operators.conftest import SAMPLES

FOLDER = str(SAMPLES / "kernelbench" / "level2")
REFUSED = "the agent worker's queue refused it (OperationalError); start the import again"


def broker_down(*args: object) -> None:
    raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


@pytest.fixture
def engineer(
    transactional_db: None, team: Team, settings: object,
    client_for: Callable[[Role | str], Client], monkeypatch: pytest.MonkeyPatch,
) -> Client:  # fmt: skip
    settings.KOPE_IMPORT_ROOTS = [SAMPLES]  # type: ignore[attr-defined]
    monkeypatch.setattr(import_folder, "delay", broker_down)
    return client_for(Role.ENGINEER)


def test_a_page_import_the_broker_refuses_ends_failed_saying_so(
    engineer: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        started = engineer.post("/t/kernels/imports/new/", {"path": FOLDER, "scale": "1"})

    run = ImportRun.objects.get()
    assert started.status_code == 302
    assert run.status == ImportRun.Status.FAILED and run.error == REFUSED
    assert run.finished_at is not None and "the broker refused it" in caplog.text
    page = engineer.get(started["Location"]).content.decode()
    assert escape(REFUSED) in page and "every 1s" not in page


def test_an_api_import_the_broker_refuses_answers_it_failed(engineer: Client) -> None:
    started = engineer.post("/api/teams/kernels/imports", {"path": FOLDER},
                            content_type="application/json")  # fmt: skip

    assert started.status_code == 202
    assert (started.json()["status"], started.json()["error"]) == ("failed", REFUSED)
    assert ImportRun.objects.get().status == ImportRun.Status.FAILED
