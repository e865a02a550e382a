"""Comparing two measured cases in Chromium, with a real device worker: the diff drawn by
diff2html (agent text inert), the per-call timeline drawn by Plotly, both views in the URL,
and a cachegrind profile of each made on request; all of it under the strict CSP, which the
page's headers carry (a refused script or style would be a console error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import small_vector_add, two_cases
from tests.processes import celery_worker, daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, submit_login

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "var" / "test" / "compare-page.png"


@pytest.fixture
def measured(transactional_db: None) -> tuple[Membership, tuple[int, int]]:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="pairs", name="Pairs")
    engineer = MembershipFactory(team=team, role=Role.ENGINEER)
    return engineer, two_cases(team, small_vector_add(), evaluate=True)


def test_comparing_two_cases_shows_the_diff_the_timeline_and_profiles(
    measured: tuple[Membership, tuple[int, int]], chromium: Browser
) -> None:
    engineer, (a, b) = measured
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "device.cpu", "device@compare"):
        page = chromium.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
        login = page.goto(f"{url}/accounts/login/?next=/t/pairs/cases/{b}/")
        assert login is not None
        headers = login.headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "style-src 'self'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "same-origin"
        submit_login(page, engineer)
        page.get_by_role("link", name="Compare with its parent").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Case #{a} and case #{b}")

        diff = page.locator("#code-diff")
        expect(diff).to_have_attribute("data-renderer", "diff2html")
        expect(diff.locator(".d2h-file-side-diff").first).to_be_visible()  # split
        expect(diff).to_contain_text("<script>alert('planted')</script>")  # as text
        expect(page.locator("#timeline")).to_have_attribute("data-renderer", "plotly")
        expect(page.locator("#timeline .scatterlayer .trace")).to_have_count(4)
        inks = {}
        for scheme in ("dark", "light"):  # the axes' text in the page's colour, redrawn
            page.emulate_media(color_scheme=scheme)
            ink = page.locator("#timeline").evaluate("holder => getComputedStyle(holder).color")
            expect(page.locator("#timeline .xtick text").first).to_have_css("fill", ink)
            inks[scheme] = ink
        assert inks["dark"] != inks["light"]

        page.get_by_role("link", name="Unified").click()
        assert "view=unified" in page.url
        expect(diff.locator(".d2h-file-diff").first).to_be_visible()
        page.get_by_role("link", name="Hide whitespace changes").click()
        assert "ws=ignore" in page.url
        expect(diff.locator(".d2h-del")).to_have_count(0)

        page.get_by_role("button", name="Profile both with cachegrind").click()
        # the page polls while a device worker profiles each kernel under cachegrind
        expect(page.get_by_role("link", name="Chrome Trace JSON")).to_have_count(2, timeout=120_000)
        expect(page.locator("table.line-costs")).to_have_count(2)
        # each profile says what it was built with: the timed flags, valgrind's ISA for -march
        expect(page.locator(".profile-build").first).to_contain_text("-march=x86-64-v3")
        expect(page.locator(".profile-build").first).to_contain_text("-O3")
        expect(page.locator("table.line-costs").nth(1)).to_contain_text("out[i] = a[i] + b[i];")
        with page.expect_download() as download:
            page.get_by_role("link", name="Chrome Trace JSON").first.click()
        assert download.value.suggested_filename.startswith("kope-profile-")
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        assert problems == []
