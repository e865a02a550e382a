"""A case whose verdict a re-run reused says so on its page, and is measured again from there
by a real device worker, the new figures filling in without a reload."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.runs.models import OptimizationSession
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import NAIVE, evaluated, recorded_case, small_vector_add
from tests.processes import celery_worker, daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in, script_errors

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]


@dataclass
class Reused:
    engineer: Membership
    first: int
    again: int  # the re-run's case, whose verdict is the first one's


@pytest.fixture
def reused(transactional_db: None) -> Reused:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="again", name="Again")
    engineer = MembershipFactory(team=team, role=Role.ENGINEER)
    version = small_vector_add()
    evaluation = evaluated(team, version, NAIVE)
    runs = [OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
            for _ in range(2)]  # fmt: skip
    first, again = (recorded_case(run, version, 0, None, NAIVE, "starting kernel", evaluation)
                    for run in runs)  # fmt: skip
    return Reused(engineer, first, again)


def test_a_reused_verdict_says_so_and_is_measured_again_from_the_page(
    reused: Reused, chromium: Browser
) -> None:
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "device.cpu", "device@again"):
        # on a phone, in the dark: the table of measurements scrolls in its own box
        page = chromium.new_page(viewport={"width": 390, "height": 900}, color_scheme="dark")
        errors = script_errors(page)
        log_in(page, url, reused.engineer, f"/t/again/cases/{reused.again}/")
        note = page.locator("#verdict-reused")
        expect(note).to_contain_text(f"Reused from case #{reused.first}")
        note.get_by_role("link", name="measure it again").click()
        page.get_by_role("button", name="Measure again").click()
        # queued, then measured by the device worker; the section fills in as it polls
        row = page.locator("table.measurements tbody tr").first
        expect(row).to_contain_text("done", timeout=60_000)
        expect(row).to_contain_text(" ms")
        expect(row).to_contain_text("x")
        expect(page.get_by_role("button", name="Measure again")).to_be_visible()
        expect(page.locator("#verdict-reused")).to_be_visible()  # the verdict stays the first's
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        assert errors == []
