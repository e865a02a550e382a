"""An import asked for over the API runs in a real Celery worker process and reports back."""

from __future__ import annotations

import time

from django.test import Client

from apps.accounts.roles import Role
from apps.operators.models import ImportRun, OperatorVersion
from tests.factories import MembershipFactory, TeamFactory
from tests.operators.conftest import SAMPLES
from tests.processes import celery_worker
from tests.workbench.test_live_events import process_env


def wait_until_finished(run_id: int, timeout_s: float = 120) -> ImportRun:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = ImportRun.objects.get(pk=run_id)
        if run.status != ImportRun.Status.RUNNING:
            return run
        time.sleep(0.25)
    raise AssertionError(f"import {run_id} still running after {timeout_s} s: {run.report}")


def test_an_api_import_is_done_by_the_worker(transactional_db: None, settings) -> None:  # type: ignore[no-untyped-def]
    settings.KOPE_IMPORT_ROOTS = [SAMPLES]
    membership = MembershipFactory(team=TeamFactory(slug="imports"), role=Role.ENGINEER)
    client = Client()
    client.force_login(membership.user)
    folder = SAMPLES / "npukernelbench" / "level2"

    with celery_worker(process_env("single-machine"), "agent", "importer@test"):
        response = client.post("/api/teams/imports/imports", {"path": str(folder)},
                               content_type="application/json")  # fmt: skip
        assert response.status_code == 202, response.content
        started = response.json()
        assert (started["status"], started["format"]) == ("running", "npukernelbench")
        run = wait_until_finished(started["id"])

    assert run.status == "done" and (run.done, run.total) == (1, 1)
    assert run.report == [{"problem": "norm/RmsNorm", "outcome": "imported", "reason": "",
                           "operator": "npu_l2_rms_norm", "version": 1}]  # fmt: skip
    version = OperatorVersion.objects.get(operator__team=membership.team)
    assert version.created_by == membership.user and version.cases.count() == 3
    page = client.get(f"/t/imports/imports/{run.pk}/").content.decode()
    assert "Done: 1 imported, 0 unchanged, 0 skipped, 0 failed" in page
