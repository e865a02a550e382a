"""Bringing your own kernels in Chromium, on a real stack (Daphne and Celery workers): a kernel
uploaded on an operator's page is evaluated by a device worker and its verdict streamed into
the page; a starting kernel pasted into the launch form is the one the session starts from;
and a suite uploaded as an archive is imported by the agent worker, its folder removed after."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from playwright.sync_api import Browser, Page, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.devices.models import KernelSource
from apps.runs.models import OptimizationSession
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import NAIVE, small_vector_add
from tests.operators.conftest import SAMPLES
from tests.processes import celery_worker, daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in, script_errors

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
QUICK_MEASUREMENT = {"KOPE_EVAL_SEEDS": "1", "KOPE_EVAL_WARMUP": "1", "KOPE_EVAL_REPEATS": "5"}


@pytest.fixture
def engineer(transactional_db: None) -> Membership:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    small_vector_add()
    return MembershipFactory(team=TeamFactory(slug="own", name="Own"), role=Role.ENGINEER)


def from_another_thread(read: Callable[[], Any]) -> Any:
    """What `read` returns, read with the ORM beside Playwright's event loop."""
    import threading

    found: list[Any] = []

    def run() -> None:
        try:
            found.append(read())
        finally:
            connections.close_all()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=30)
    return found[0]


def test_a_kernel_uploaded_on_an_operator_page_has_its_verdict_streamed_in(
    engineer: Membership, chromium: Browser
) -> None:
    env = {**process_env("single-machine"), **QUICK_MEASUREMENT}
    with daphne(env) as url:
        page = chromium.new_page()
        errors = script_errors(page)
        log_in(page, url, engineer, "/t/own/operators/vector_add_small/")
        page.get_by_label("or upload a file").set_input_files(
            files=[{"name": "mine.c", "mimeType": "text/x-c", "buffer": NAIVE.encode()}]
        )
        page.get_by_role("button", name="Evaluate").click()

        expect(page.get_by_role("heading", level=1)).to_contain_text(
            "Kernel mine.c on vector_add_small"
        )
        expect(page.locator("#live-status")).to_have_text("Live updates: connected.")
        expect(page.locator("#trial-status")).to_have_text("queued")  # no device worker yet
        # The worker starts only now, with the page open: what it finds comes over the socket.
        with celery_worker(env, "device.cpu", "device@own-kernel"):
            expect(page.locator("#trial-verdict")).to_have_text("CORRECT", timeout=120_000)
        expect(page.locator("#trial-status")).to_have_text("done")
        expect(page.locator("#verdict-text")).to_contain_text("correct: yes")
        page.reload()  # the page alone, without the socket, says the same
        expect(page.locator("#trial-verdict")).to_have_text("CORRECT")
        page.get_by_role("link", name="every kernel evaluated on vector_add_small").click()
        expect(page.locator("table")).to_contain_text("mine.c")
        assert errors == []


def test_a_starting_kernel_pasted_into_the_launch_form_is_the_one_its_session_starts_from(
    engineer: Membership, chromium: Browser
) -> None:
    mine = "/* my own start */\n" + NAIVE
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        errors = script_errors(page)
        log_in(page, url, engineer, "/t/own/sessions/new/")
        page.get_by_label("Operators").select_option("vector_add_small")
        page.get_by_label("Starting kernel 1: operator").select_option("vector_add_small")
        page.get_by_label("Starting kernel 1: paste it").fill(mine)
        expect(page.locator("#estimate")).to_contain_text("1 operator")  # the estimate still works
        page.get_by_role("button", name="Launch").click()

        expect(page.get_by_role("heading", level=1)).to_contain_text("Session")
        assert errors == []

    session = from_another_thread(lambda: OptimizationSession.objects.get(team=engineer.team))
    operators = session.config["operators"]
    assert [(o["slug"], o["start_source_sha256"]) for o in operators] == [
        ("vector_add_small", KernelSource.digest_of(mine))]  # fmt: skip


def relu_archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(SAMPLES / "kernelbench" / "level1" / "1_ReLU.py", "level1/1_ReLU.py")
    return buffer.getvalue()


def import_detail_done(page: Page) -> None:
    expect(page.locator("#import-progress")).to_contain_text("Done: 1 imported", timeout=180_000)


def test_a_suite_uploaded_as_an_archive_is_imported_and_its_folder_removed(
    engineer: Membership, chromium: Browser
) -> None:
    env = {**process_env("single-machine"), "KOPE_REFERENCE_TIMEOUT_S": "60"}
    with daphne(env) as url, celery_worker(env, "agent", "agent@own-archive"):
        page = chromium.new_page()
        errors = script_errors(page)
        log_in(page, url, engineer, "/t/own/imports/")
        archive = {"name": "level1.zip", "mimeType": "application/zip", "buffer": relu_archive()}
        page.get_by_label("or upload an archive").set_input_files(files=[archive])
        page.get_by_role("button", name="Import").click()

        import_detail_done(page)
        expect(page.locator("#import-progress")).to_contain_text("kb_l1_1_relu")
        page.goto(f"{url}/t/own/suites/kernelbench-level1/")
        expect(page.locator("main")).to_contain_text("ReLU")
        assert errors == []
    assert list(Path(settings.KOPE_IMPORT_UPLOAD_DIR).iterdir()) == []
