"""Browsing the forest in Chromium: expand a branch in place, open a case, see its diff; the
same by keyboard alone."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_forest_pages import small_forest
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in

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


@dataclass
class ForestPage:
    page: Page
    ids: dict[str, int]
    csp_violations: list[str]


@pytest.fixture
def forest_page(
    forest: tuple[Membership, dict[str, int]], chromium: Browser
) -> Iterator[ForestPage]:
    """The forest page, logged in as a viewer, with the CSP violations its console reports."""
    viewer, ids = forest
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        violations: list[str] = []
        page.on("console", lambda m: violations.append(m.text) if "Refused" in m.text else None)
        log_in(page, url, viewer, "/t/trees/forest/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Forest")
        yield ForestPage(page, ids, violations)


def test_expanding_a_branch_and_opening_a_case(forest_page: ForestPage) -> None:
    page, ids = forest_page.page, forest_page.ids
    page.get_by_role("link", name="expand (2)").click()  # htmx, in place
    fast = page.locator(f'li[data-case="{ids["fast"]}"]')
    expect(fast).to_be_visible()
    expect(page.locator(f'li[data-case="{ids["start"]}"]')).to_have_attribute(
        "aria-expanded", "true"
    )
    expect(page.locator(f'li[data-case="{ids["broken"]}"]')).to_contain_text("incorrect")
    assert page.url.endswith("/t/trees/forest/")  # no page load
    # htmx takes up the links that came in a swap at its settle, 20 ms on, when it takes off
    # their htmx-added class; clicked before that, a link is followed as a plain one.
    expect(page.locator(".htmx-added")).to_have_count(0)
    fast.get_by_role("link", name="expand (1)").click()
    expect(page.locator(f'li[data-case="{ids["faster"]}"]')).to_be_visible()
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    fast.get_by_role("link", name=f"#{ids['fast']}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Case #{ids['fast']}")
    expect(page.locator("pre.diff .diff-add")).to_contain_text("+int c;")
    assert forest_page.csp_violations == []


def test_the_forest_is_one_tab_stop_walked_with_the_arrow_keys(forest_page: ForestPage) -> None:
    page, ids = forest_page.page, forest_page.ids
    node = {name: page.locator(f'li[data-case="{case_id}"]') for name, case_id in ids.items()}

    expect(page.get_by_role("tree", name="Attempts of gemm on cpu-c")).to_be_visible()
    page.get_by_role("button", name="Show").focus()
    page.keyboard.press("Tab")
    expect(node["start"]).to_be_focused()
    expect(node["start"]).to_have_attribute("aria-expanded", "false")
    page.keyboard.press("ArrowRight")  # opens the branch, loading it
    expect(node["start"]).to_have_attribute("aria-expanded", "true")
    expect(node["fast"]).to_be_visible()
    expect(node["start"]).to_be_focused()

    page.keyboard.press("ArrowRight")  # into the branch
    expect(node["fast"]).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(node["broken"]).to_be_focused()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowRight")
    expect(node["faster"]).to_be_visible()
    page.keyboard.press("End")
    expect(node["broken"]).to_be_focused()
    page.keyboard.press("Home")
    expect(node["start"]).to_be_focused()

    page.keyboard.press("ArrowLeft")  # closes the branch
    expect(node["start"]).to_have_attribute("aria-expanded", "false")
    expect(node["fast"]).to_be_hidden()
    page.keyboard.press("ArrowDown")  # nothing shown below it
    expect(node["start"]).to_be_focused()
    page.keyboard.press("Shift+Tab")  # one tab stop: back out to the filters
    expect(page.get_by_role("button", name="Show")).to_be_focused()

    page.keyboard.press("Tab")
    expect(node["start"]).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Case #{ids['start']}")
    assert forest_page.csp_violations == []


def test_a_branch_opened_by_key_the_moment_it_arrives_loads_in_place(
    forest_page: ForestPage,
) -> None:
    """Right on a node whose branch had just arrived, before htmx took up the new links (20 ms
    on, at its settle), followed the link: a whole page load instead of the branch in place.
    Seen once in a full run, as a keyboard test that could not find the branch."""
    page, ids = forest_page.page, forest_page.ids
    start = page.locator(f'li[data-case="{ids["start"]}"]')
    page.evaluate(
        """fast => document.body.addEventListener("htmx:afterSwap", () => {
             const item = document.querySelector(`li[data-case="${fast}"]`);
             item.focus();
             item.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
           }, {once: true})""",
        ids["fast"],
    )
    start.focus()
    page.keyboard.press("ArrowRight")  # start's branch arrives, and Right is pressed on fast

    expect(page.locator(f'li[data-case="{ids["faster"]}"]')).to_be_visible()
    assert page.url.endswith("/t/trees/forest/")  # in place: no page load
