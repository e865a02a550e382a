"""Browsing the forest in Chromium: expand a branch in place, open a case, see its diff."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_forest_pages import small_forest
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "var" / "test" / "forest-page.png"


@pytest.fixture
def forest(transactional_db: None) -> tuple[Membership, dict[str, int]]:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="trees", name="Trees")
    return MembershipFactory(team=team, role=Role.VIEWER), small_forest(team)


def test_expanding_a_branch_and_opening_a_case(
    forest: tuple[Membership, dict[str, int]], chromium: Browser
) -> None:
    viewer, ids = forest
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        violations: list[str] = []
        page.on("console", lambda m: violations.append(m.text) if "Refused" in m.text else None)
        page.goto(f"{url}/accounts/login/?next=/t/trees/forest/")
        page.locator("#id_username").fill(viewer.user.username)
        page.locator("#id_password").fill("pw-for-tests")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Forest")

        page.get_by_role("link", name="expand (2)").click()  # htmx, in place
        fast = page.locator(f'li[data-case="{ids["fast"]}"]')
        expect(fast).to_be_visible()
        expect(page.locator(f'li[data-case="{ids["broken"]}"]')).to_contain_text("incorrect")
        assert page.url.endswith("/t/trees/forest/")  # no page load
        fast.get_by_role("link", name="expand (1)").click()
        expect(page.locator(f'li[data-case="{ids["faster"]}"]')).to_be_visible()
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        fast.get_by_role("link", name=f"#{ids['fast']}").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text(f"Case #{ids['fast']}")
        expect(page.locator("pre.diff .diff-add")).to_contain_text("+int c;")
        assert violations == []
