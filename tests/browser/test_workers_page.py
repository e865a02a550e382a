"""The Workers page in Chromium: htmx posts the check, answers arrive over the websocket."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, TeamFactory
from tests.processes import celery_worker, daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]


@pytest.fixture
def engineer(transactional_db: None) -> Membership:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    return MembershipFactory(team=TeamFactory(slug="live", name="Live"), role=Role.ENGINEER)


def test_checking_workers_shows_each_queues_answer_live(
    engineer: Membership, chromium: Browser
) -> None:
    membership = engineer
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "agent,device.cpu", "browser-check@test"):
        page = chromium.new_page()
        violations: list[str] = []
        page.on("console", lambda m: violations.append(m.text) if "Refused" in m.text else None)
        log_in(page, url, membership, "/t/live/workers/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Workers")
        expect(page.get_by_role("cell", name="browser-check@test")).to_be_visible()

        page.get_by_role("button", name="Check workers").click()
        expect(page.locator("#check-status")).to_contain_text(re.compile(r"Check \w+ sent to"))
        answers = page.locator("#answers li")
        expect(answers).to_have_count(2, timeout=30_000)
        expect(answers.filter(has_text="device.cpu")).to_contain_text("browser-check@test")
        expect(answers.filter(has_text="agent")).to_contain_text("browser-check@test")
        page.screenshot(path=str(_screenshot_path()))
        assert violations == []


def _screenshot_path():  # type: ignore[no-untyped-def]
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "var" / "test" / "workers-page.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
