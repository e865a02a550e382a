"""The Workers page in Chromium: htmx posts the check, answers arrive over the websocket."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.db.transaction import atomic
from playwright.sync_api import Browser, Page, Route, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.accounts.services import membership_remove
from apps.devices.workers import worker_check_start
from tests.factories import MembershipFactory, TeamFactory
from tests.processes import celery_worker, daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in
from .test_untrusted_text import in_another_thread

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]

CLOSED_OUT = "Live answers: closed: you are no longer in this team (or signed out). Log in again"


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


def test_the_page_comes_before_the_workers_are_asked_and_their_answer_fills_it_in(
    engineer: Membership, chromium: Browser
) -> None:
    """The page waited on a broadcast ping (up to KOPE_WORKER_PING_TIMEOUT_MS) before a byte
    of it came. Now it comes saying "checking…"; the list is asked for afterwards: it is held
    back here until the page is shown, so a page that waited for it could not be shown."""
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "agent,device.cpu", "at-once@test"):
        page = chromium.new_page()
        log_in(page, url, engineer, "/t/live/workers/")
        held: list[Route] = []
        page.route(re.compile(r"/workers/\?part=list$"), lambda route: held.append(route))

        response = page.goto(f"{url}/t/live/workers/")
        assert response is not None and response.ok
        first_render = response.text()
        assert "Checking which workers are connected" in first_render
        assert "at-once@test" not in first_render  # nobody was asked before it was sent
        expect(page.locator("#workers-checking")).to_be_visible()
        expect(page.get_by_role("cell", name="at-once@test")).to_have_count(0)
        for _ in range(200):  # the route's handler runs while Playwright waits
            if held:
                break
            page.wait_for_timeout(50)
        assert len(held) == 1, "the page did not ask for the list"

        held[0].continue_()
        expect(page.get_by_role("cell", name="at-once@test")).to_be_visible()
        expect(page.locator("#workers-checking")).to_have_count(0)


def test_without_javascript_the_page_lists_the_workers_on_request(
    engineer: Membership, chromium: Browser
) -> None:
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "agent,device.cpu", "no-js@test"):
        context = chromium.new_context(java_script_enabled=False)
        page = context.new_page()
        log_in(page, url, engineer, "/t/live/workers/")
        expect(page.locator("#workers-checking")).to_be_visible()
        page.get_by_role("link", name="Wait for the answer").click()
        expect(page.get_by_role("cell", name="no-js@test")).to_be_visible()


def test_a_second_check_shows_only_its_own_answers(engineer: Membership, chromium: Browser) -> None:
    """The answers of every check piled up in one list, none saying which check it answered:
    with the device worker gone since, an earlier check's device.cpu answer read as if it had
    answered the latest one."""
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "agent,device.cpu", "twice@test"):
        page = chromium.new_page()
        log_in(page, url, engineer, "/t/live/workers/")
        first = check_and_wait_for_answers(page)
        second = check_and_wait_for_answers(page, previous=first)
        expect(page.locator("#answers li")).to_have_count(2)
        expect(page.locator(f'#answers li[data-check="{second}"]')).to_have_count(2)


def test_a_dropped_socket_is_said_and_a_check_after_it_answered(
    engineer: Membership, chromium: Browser
) -> None:
    """The answers come over a websocket. When it dropped (Daphne restarted), the page said
    nothing, and the answers sent meanwhile were missing without a word."""
    env = process_env("single-machine")
    with celery_worker(env, "agent,device.cpu", "dropped@test"):
        with daphne(env) as url:
            page = chromium.new_page()
            log_in(page, url, engineer, "/t/live/workers/")
            live = page.locator("#live-status")
            expect(live).to_have_text("Live answers: connected.")
        expect(live).to_have_text("Live answers: connection lost, reconnecting… Answers that "
                                  "come meanwhile are not shown.")  # fmt: skip
        with daphne(env, port=urlsplit(url).port):  # the same address, as after a restart
            expect(live).to_have_text(
                "Live answers: reconnected. Answers sent while the connection was down are not "
                "shown: check again to see every worker's.", timeout=60_000,
            )  # fmt: skip
            check_and_wait_for_answers(page)


def test_a_member_removed_while_watching_is_told_and_sees_no_more_answers(
    engineer: Membership, chromium: Browser
) -> None:
    in_another_thread(lambda: MembershipFactory(team=engineer.team, role=Role.ADMIN))
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "agent,device.cpu", "removed@test"):
        page = chromium.new_page()
        log_in(page, url, engineer, "/t/live/workers/")
        live = page.locator("#live-status")
        expect(live).to_have_text("Live answers: connected.")

        user = engineer.user.username
        in_another_thread(lambda: atomic(membership_remove)(team=engineer.team, username=user))
        in_another_thread(lambda: atomic(worker_check_start)(team=engineer.team))
        expect(live).to_have_text(CLOSED_OUT, timeout=30_000)
        assert page.locator("#answers li").count() == 0


def test_a_member_removed_while_the_socket_was_down_is_told_when_it_reconnects(
    engineer: Membership, chromium: Browser
) -> None:
    """Refused at the handshake, htmx's reconnection reached the browser as 1006 (an abnormal
    closure), so the page said "reconnecting…" for ever and htmx kept trying."""
    in_another_thread(lambda: MembershipFactory(team=engineer.team, role=Role.ADMIN))
    env = process_env("single-machine")
    with daphne(env) as url:
        page = chromium.new_page()
        log_in(page, url, engineer, "/t/live/workers/")
        live = page.locator("#live-status")
        expect(live).to_have_text("Live answers: connected.")
    expect(live).to_contain_text("connection lost, reconnecting…")
    user = engineer.user.username
    in_another_thread(lambda: atomic(membership_remove)(team=engineer.team, username=user))
    with daphne(env, port=urlsplit(url).port):  # the same address, as after a restart
        expect(live).to_have_text(CLOSED_OUT, timeout=60_000)


def check_and_wait_for_answers(page: Page, previous: str = "") -> str:
    """Press "Check workers" and wait for both queues' answers to it; the check's id."""
    page.get_by_role("button", name="Check workers").click()
    expect(page.locator("#check-status")).to_contain_text(re.compile(r"Check \w+ sent to"))
    check = page.locator("#check-status code").first
    if previous:
        expect(check).not_to_have_text(previous)
    check_id = check.inner_text()
    expect(page.locator(f'#answers li[data-check="{check_id}"]')).to_have_count(2, timeout=30_000)
    return check_id


def _screenshot_path():  # type: ignore[no-untyped-def]
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "var" / "test" / "workers-page.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
