"""Every page a team member reaches, by keyboard, in Chromium: test_every_page.py's team and
crawl (admin in the light colour scheme, viewer in the dark), with Tab pressed from the top
of each page through every tab stop. Each focused element must look different focused than
unfocused (outline, box-shadow, border or background), with a focus outline of at least 3:1
contrast against what it is drawn on (or, shown without an outline, a border, shadow or
background colour at least 3:1 from its unfocused colour), and must be on screen (the skip
link, off-screen until focused, included); Tab must go round the page without getting stuck
in a widget; every visible link, button, field, summary and `tabindex=0` element must be a
tab stop, unless it left the tab order on purpose inside a widget walked with arrow keys (the
forest tree); and every chart needs a text alternative that says what it plots."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from apps.accounts.roles import Role

from .conftest import CHROMIUM
from .test_every_page import PopulatedTeam, crawl_as, populated  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
WALK_SCRIPT = (Path(__file__).parent / "keyboard_walk.js").read_text()
MAX_TAB_STOPS = 80


class KeyboardWalk:
    """The Tab walk as a page check for `crawl`, which keeps how many stops each page had."""

    def __init__(self) -> None:
        self.stops: dict[str, int] = {}
        self.capped: list[str] = []

    def __call__(self, page: Page) -> list[str]:
        page.evaluate(WALK_SCRIPT)
        page.evaluate("kopeKeyboard.start()")
        problems: list[str] = []
        capped = True
        for _ in range(MAX_TAB_STOPS + 1):
            page.keyboard.press("Tab")
            stop = page.evaluate("kopeKeyboard.step()")
            problems += stop["problems"]
            if stop["done"]:
                capped = False
                break
        if capped:
            self.capped.append(page.url)
        walked = page.evaluate("capped => kopeKeyboard.finish(capped)", capped)
        self.stops[page.url] = walked["stops"]
        return problems + walked["problems"]


@pytest.mark.parametrize(("role", "scheme"), [(Role.ADMIN, "light"), (Role.VIEWER, "dark")])
def test_every_page_a_member_reaches_works_by_keyboard(
    populated: PopulatedTeam,  # noqa: F811
    role: Role,
    scheme: str,
    chromium: Browser,
) -> None:
    walk = KeyboardWalk()
    began = time.monotonic()
    visited, problems = crawl_as(populated, role, scheme, chromium, check=walk)
    print(
        f"{len(visited)} pages in {time.monotonic() - began:.1f} s (server start included); "
        "tab stops per page:"
    )
    print(*(f"{stops:3} {url}" for url, stops in walk.stops.items()), sep="\n")
    print(f"the walk stopped at {MAX_TAB_STOPS} stops on {len(walk.capped)} page(s):", *walk.capped)
    assert len(walk.stops) >= 20, visited  # the crawl really went through the team's pages
    assert problems == [], "\n".join(problems)
