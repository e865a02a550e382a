"""A double-clicked submit button sends its form once (static/js/forms.js, and hx-sync on the
htmx form): in Chromium, a double-clicked Launch makes one session, a double-clicked Re-run one
more, a double-clicked Check workers one check, and a form come back to with the back button
(from the back/forward cache) or whose sending was stopped can be sent again."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import (
    APIResponse,
    Browser,
    ConsoleMessage,
    Locator,
    Page,
    Route,
    expect,
    sync_playwright,
)

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, TeamFactory, stored_builtin
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, CHROMIUM_ARGS, log_in, script_errors

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
# A request the browser dropped for a second one still reaches the server: time for it to land.
SETTLE_MS = 1500


@pytest.fixture
def engineer(transactional_db: None) -> Membership:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    stored_builtin("gemm")
    return MembershipFactory(team=TeamFactory(slug="once", name="Once"), role=Role.ENGINEER)


@pytest.fixture
def chromium_with_bfcache() -> Iterator[Browser]:
    """Chromium as a person has it: Playwright turns the back/forward cache off by default."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            ignore_default_args=["--disable-back-forward-cache"],
        )
        try:
            yield browser
        finally:
            browser.close()


class LateAnswers:
    """A server slower than a double click: each POST reaches it at once, but the page gets
    the answer only once released (a loopback server answers within the 0.1 s a person takes
    between the two clicks)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.posts: list[str] = []
        self.held: list[tuple[Route, APIResponse]] = []
        self.released = False
        page.route("**/*", self.answer)

    def answer(self, route: Route) -> None:
        if route.request.method != "POST":
            route.fallback()
            return
        self.posts.append(route.request.url)
        answer = route.fetch(max_redirects=0)
        if self.released:
            route.fulfill(response=answer)
        else:
            self.held.append((route, answer))

    def release(self) -> None:
        self.released = True
        for route, answer in self.held:
            route.fulfill(response=answer)
        self.page.wait_for_timeout(300)  # for a POST htmx queued behind the first one
        self.page.unroute("**/*", self.answer)


def wait_on_page(page: Page, done: Callable[[], object], seconds: float) -> None:
    """Wait for `done` in Playwright's time, not tests.processes.wait_until's sleep: routes and
    console messages reach their handlers only while Playwright waits."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        page.wait_for_timeout(20)


def centre_of(button: Locator) -> tuple[float, float]:
    """Where to click it by position: while a navigation is pending (a POST held unanswered)
    Playwright finds no element to click, and its own click waits for that navigation."""
    button.scroll_into_view_if_needed()
    box = button.bounding_box()
    assert box is not None
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


CLICK_MARK = "double-click test, clicked: "
# Logged, not stored: while a navigation is pending, page.evaluate waits for the next page.
RECORD_CLICKS = f"""document.addEventListener("click", (event) => console.log(
    {CLICK_MARK!r} + (event.target.closest("button")?.textContent ?? event.target.tagName)),
  {{capture: true}})"""


def double_click(page: Page, button: Locator) -> list[str]:
    """Click twice, the second time while the first POST waits for its answer (Playwright's
    dblclick is quicker than a person: Chromium folds a second submission into a first one
    that has not started yet). Returns the URLs the page POSTed to."""
    clicked: list[str] = []

    def record_click(message: ConsoleMessage) -> None:
        if message.text.startswith(CLICK_MARK):
            clicked.append(message.text.removeprefix(CLICK_MARK))

    name = button.text_content()
    page.on("console", record_click)
    page.evaluate(RECORD_CLICKS)
    x, y = centre_of(button)
    late = LateAnswers(page)
    page.mouse.click(x, y)
    wait_on_page(page, lambda: late.posts, 10)
    assert late.posts, f"the first click sent nothing (it landed on {clicked})"
    # The server is slow when the machine is busy: a POST it has not answered yet is still held.
    wait_on_page(page, lambda: late.held, 60)
    assert late.held, "the server did not answer the first POST within 60 s"
    page.wait_for_timeout(100)
    page.mouse.click(x, y)
    wait_on_page(page, lambda: len(clicked) == 2, 5)
    page.remove_listener("console", record_click)
    # A click that missed the button would pass for one the page dropped.
    assert clicked == [name, name], f"the two clicks landed on {clicked}, not on {name!r}"
    late.release()
    return late.posts


def session_ids(page: Page, url: str) -> set[int]:
    response = page.request.get(f"{url}/api/teams/once/sessions?limit=100")
    assert response.ok, response.text()
    return {session["id"] for session in response.json()["items"]}


def new_sessions(page: Page, url: str, before: set[int]) -> set[int]:
    """The sessions made since `before`, once the page shows one and a second request has had
    time to make another."""
    expect(page.get_by_role("heading", level=1)).to_contain_text("Session #")
    page.wait_for_timeout(SETTLE_MS)
    return session_ids(page, url) - before


def test_a_double_click_sends_a_form_once_and_back_lets_it_be_sent_again(
    engineer: Membership, chromium_with_bfcache: Browser
) -> None:
    with daphne(process_env("single-machine")) as url:
        page = chromium_with_bfcache.new_page()
        errors = script_errors(page)
        log_in(page, url, engineer, "/t/once/sessions/new/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Launch a session")
        page.locator("#id_operators").select_option("gemm")
        page.locator("#id_rounds").fill("1")
        # The page has settled: the estimate of these settings is in.
        expect(page.locator("#estimate")).to_contain_text("at most 1 evaluation (")
        page.evaluate("window.leftForAnotherPage = true")

        posts = double_click(page, page.get_by_role("button", name="Launch"))
        launched = new_sessions(page, url, set())
        assert len(launched) == 1, f"a double-clicked Launch made sessions {sorted(launched)}"
        assert len(posts) == 1 and page.url.endswith(f"/sessions/{min(launched)}/")

        double_click(page, page.get_by_role("button", name="Re-run with the same settings"))
        rerun = new_sessions(page, url, launched)
        assert len(rerun) == 1, f"a double-clicked Re-run made sessions {sorted(rerun)}"

        # A page from the bfcache fires no load event: wait for the commit only.
        page.go_back(wait_until="commit")
        page.go_back(wait_until="commit")
        expect(page.get_by_role("heading", level=1)).to_have_text("Launch a session")
        assert page.evaluate("window.leftForAnotherPage === true"), "not from the bfcache"
        page.get_by_role("button", name="Launch").click(timeout=5000)
        again = new_sessions(page, url, launched | rerun)
        assert len(again) == 1, f"Launch after going back made sessions {sorted(again)}"

        page.goto(f"{url}/t/once/workers/")
        # The list of workers comes after the page (a broadcast ping); the double click is
        # measured once it has come (clicked while it was being fetched, the first click sent
        # nothing here: not understood yet, see the closing note of 2026-12-07)
        expect(page.locator("#workers-checking")).to_have_count(0, timeout=30_000)
        posts = double_click(page, page.get_by_role("button", name="Check workers"))
        expect(page.locator("#check-status")).to_contain_text("sent to")
        assert len(posts) == 1, f"a double-clicked Check workers sent {len(posts)} checks"
        assert [e for e in errors if "WebSocket" not in e] == []


def test_a_form_whose_sending_was_stopped_can_be_sent_again(
    engineer: Membership, chromium: Browser
) -> None:
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        log_in(page, url, engineer, "/t/once/sessions/new/")
        page.locator("#id_operators").select_option("gemm")
        expect(page.locator("#estimate")).to_contain_text("at most 30 evaluations (")
        posts: list[Route] = []
        page.route("**/*", lambda route: posts.append(route) if route.request.method == "POST"
                   else route.fallback())  # fmt: skip
        launch = page.get_by_role("button", name="Launch")
        x, y = centre_of(launch)

        page.mouse.click(x, y)
        wait_on_page(page, lambda: posts, 10)
        assert len(posts) == 1, "the first click sent nothing"
        # The Stop button, as the browser's own: the page stays, the POST is cancelled.
        page.context.new_cdp_session(page).send("Page.stopLoading")
        posts[0].abort()
        page.unroute("**/*")
        expect(launch).not_to_have_attribute("aria-disabled", "true")  # unlocked
        page.mouse.click(x, y)

        expect(page.get_by_role("heading", level=1)).to_contain_text("Session #")
        assert len(session_ids(page, url)) == 1
