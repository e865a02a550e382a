"""Searching the knowledge base in Chromium: a query by meaning swaps in the hits and puts the
search in the URL; a filter narrows them; a document opens on its own page."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.memory.coldstart.vectors import cold_start_vectors_store
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_knowledge_pages import LOOP_ORDER, TILING, propose, record
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "var" / "test" / "knowledge-page.png"
# The first search loads the embedding model in the web process: seconds, once.
FIRST_SEARCH_MS = 60_000


@pytest.fixture
def knowledge(transactional_db: None) -> tuple[Membership, dict[str, int]]:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="library", name="Library")
    tiled = record(team, "gemm", 1, TILING, "improved")
    broken = record(team, "relu", 1, "vectorise the loop with AVX-512 masks", "incorrect")
    rule = propose(team, f"case:{tiled}", LOOP_ORDER)
    cold_start_vectors_store()
    ids = {"tiled": tiled, "broken": broken, "rule": rule.pk}
    return MembershipFactory(team=team, role=Role.VIEWER), ids


def test_searching_the_knowledge_base(
    knowledge: tuple[Membership, dict[str, int]], chromium: Browser
) -> None:
    viewer, ids = knowledge
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        violations: list[str] = []
        page.on("console", lambda m: violations.append(m.text) if "Refused" in m.text else None)
        log_in(page, url, viewer, "/t/library/knowledge/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Knowledge base")
        expect(page.locator("#results li.result")).not_to_have_count(0)  # the newest items

        page.get_by_role("searchbox").fill("cache blocking for matrix multiplication")
        page.get_by_role("button", name="Search").click()  # htmx: the results, in place
        first = page.locator("#results li.result").first
        expect(first).to_have_attribute("data-key", f"case:{ids['tiled']}",
                                        timeout=FIRST_SEARCH_MS)  # fmt: skip
        expect(first).to_contain_text("gemm on cpu-c")
        shared = parse_qs(urlparse(page.url).query)  # the search is in the URL
        assert shared["q"] == ["cache blocking for matrix multiplication"]
        expect(page.locator(f'li[data-key="rule:{ids["rule"]}"]')).to_contain_text("pending")
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        page.get_by_label("Kind").select_option("document")
        page.get_by_label("Target").select_option("cpu-c")
        page.get_by_role("searchbox").fill("the output has NaN where elements were never written")
        page.get_by_role("button", name="Search").click()
        hit = page.locator("#results li.result").first
        expect(hit).to_have_attribute("data-key", "doc:cpu-c:debugging")
        expect(page.locator("#results li.result-case")).to_have_count(0)
        assert parse_qs(urlparse(page.url).query)["target"] == ["cpu-c"]

        hit.get_by_role("link", name="Debugging cpu-c kernels").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Debugging cpu-c kernels")
        expect(page.locator("main")).to_contain_text("apps/memory/coldstart/cpu-c/debugging.md")
        page.go_back()
        expect(page.get_by_role("searchbox")).to_have_value(
            "the output has NaN where elements were never written"
        )
        assert violations == []
