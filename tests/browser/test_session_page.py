"""A session launched from the browser and watched live in Chromium, with real workers: the
event log grows as the journal does, and a dropped socket is filled in on reconnect."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db.transaction import atomic
from playwright.sync_api import Browser, Page, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.accounts.services import membership_remove
from apps.memory.journal import journal_append
from apps.runs.loop import session_begin, session_finish, session_pause
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import MembershipFactory, TeamFactory, stored_builtin
from tests.processes import celery_worker, daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in, script_errors, submit_login
from .test_untrusted_text import in_another_thread

CLOSED_OUT = "closed: you are no longer in this session's team (or signed out) · Log in again"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "var" / "test" / "session-page.png"


@pytest.fixture
def engineer(transactional_db: None) -> Membership:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    stored_builtin("gemm")
    return MembershipFactory(team=TeamFactory(slug="watch", name="Watch"), role=Role.ENGINEER)


def journal(page: Page, url: str, session_id: str) -> list[dict[str, Any]]:
    response = page.request.get(f"{url}/api/teams/watch/sessions/{session_id}/events?limit=1000")
    assert response.ok, response.text()
    events: list[dict[str, Any]] = response.json()["items"]
    return events


def journal_seqs(page: Page, url: str, session_id: str) -> list[int]:
    return [event["seq"] for event in journal(page, url, session_id)]


def links(page: Page, selector: str) -> list[str]:
    return page.locator(selector).evaluate_all("links => links.map(a => a.getAttribute('href'))")


def log_seqs(page: Page) -> list[int]:
    return [int(s) for s in page.locator("#event-log li").evaluate_all(
        "items => items.map(item => item.dataset.seq)")]  # fmt: skip


def incumbent_line(page: Page) -> list[float]:
    line: list[float] = page.evaluate(
        "() => document.getElementById('latency-chart').data"
        ".find(trace => trace.name === 'incumbent').y")  # fmt: skip
    return line


def test_a_launched_session_streams_live_and_a_dropped_socket_catches_up(
    engineer: Membership, chromium: Browser
) -> None:
    env = process_env("single-machine")
    with (
        daphne(env) as url,
        celery_worker(env, "device.cpu", "device@page"),
        celery_worker(env, "agent", "agent@page"),
    ):
        page = chromium.new_page()
        errors = script_errors(page)
        log_in(page, url, engineer, "/t/watch/sessions/new/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Launch a session")
        launch = page.get_by_role("button", name="Launch")
        where_before = launch.bounding_box()
        page.locator("#id_operators").select_option("gemm")
        expect(page.locator("#estimate")).to_contain_text("Size of the run: 1 operator")
        assert launch.bounding_box() == where_before, "the estimate moved the Launch button"
        page.locator("#id_rounds").fill("3")
        page.locator("#id_repeats").fill("5")
        page.get_by_role("button", name="Launch").click()
        expect(page.get_by_role("heading", level=1)).to_contain_text("Session #")
        session_id = page.url.rstrip("/").rsplit("/", 1)[1]

        events = page.locator("#event-log li")
        expect(events.nth(4)).to_be_attached(timeout=60_000)  # five live events
        expect(page.locator("#live-status")).to_have_text("live")

        page.evaluate("window.kopeSessionLive.drop(20000)")
        expect(page.locator("#live-status")).to_have_text("reconnecting…")
        shown = len(log_seqs(page))
        deadline = time.monotonic() + 18
        while len(journal_seqs(page, url, session_id)) <= shown and time.monotonic() < deadline:
            time.sleep(0.5)
        missed = len(journal_seqs(page, url, session_id)) - shown
        assert missed > 0, "no event was committed while the socket was down"
        assert len(log_seqs(page)) == shown  # nothing arrived while it was down

        expect(page.locator('#event-log li[data-kind="session_finished"]')).to_be_attached(
            timeout=180_000
        )
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        seqs = log_seqs(page)
        assert seqs == list(range(1, len(seqs) + 1)), "in order, without holes or duplicates"
        assert seqs == journal_seqs(page, url, session_id)
        # the operators table, the chart and the context composition follow without a reload
        expect(page.locator("#operators")).to_contain_text("finished: round budget spent")
        cases = page.locator('#event-log li[data-kind="case_recorded"]').count()
        assert cases >= 3
        # every case arrived live (the page was open before the first), each with its link
        case_pages = [f"/t/watch/cases/{event['case']}/" for event in journal(page, url, session_id)
                      if event["kind"] == "case_recorded"]  # fmt: skip
        assert len(case_pages) == cases
        assert links(page, '#event-log li[data-kind="case_recorded"] a') == case_pages
        assert sorted(links(page, "#latency-table tbody a")) == sorted(case_pages)
        expect(page.locator("#latency-chart .scatterlayer path.point")).to_have_count(cases)
        # the line takes the incumbents the journal named as they arrived, as after a reload
        named = {event["payload"]["latency_ms"] for event in journal(page, url, session_id)
                 if event["kind"] == "incumbent_replaced"}  # fmt: skip
        assert named and set(incumbent_line(page)) == named
        page.reload()
        assert set(incumbent_line(page)) == named
        expect(page.locator("#context")).to_contain_text("of 12000 tokens")
        expect(page.locator("#context")).to_contain_text("cold")
        # the dropped socket logs a console error; nothing else may
        assert [e for e in errors if "WebSocket" not in e] == []


@pytest.fixture
def queued(engineer: Membership) -> OptimizationSession:
    return session_create(team=engineer.team, user=None, operators=["gemm"], start=False)


@contextmanager
def live_session_page(
    chromium: Browser, engineer: Membership, session: OptimizationSession
) -> Iterator[tuple[Page, list[str]]]:
    """The session's page as `engineer` sees it once its socket is live, and its script
    errors."""
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        errors = script_errors(page)
        log_in(page, url, engineer, f"/t/watch/sessions/{session.pk}/")
        expect(page.locator("#live-status")).to_have_text("live")
        yield page, errors


def test_the_status_follows_the_session_live_as_a_reload_shows_it(
    engineer: Membership, queued: OptimizationSession, chromium: Browser
) -> None:
    with live_session_page(chromium, engineer, queued) as (page, errors):
        status = page.locator("#session-status")
        expect(status).to_have_text("queued")
        assert enabled_controls(page) == ["Pause", "Stop", "Re-run with the same settings"]

        in_another_thread(lambda: session_begin(queued))  # queued becomes running
        expect(page.locator('#event-log li[data-kind="session_started"]')).to_be_attached()
        expect(status).to_have_text("running")
        in_another_thread(lambda: session_pause(queued, "the API is down"))
        expect(page.locator('#event-log li[data-kind="session_paused"]')).to_be_attached()
        # the controls follow the status live, as a reload draws them
        expect(page.get_by_role("button", name="Pause")).to_be_disabled()
        # and look it: not the filled accent of a control that acts
        enabled, disabled = (
            page.get_by_role("button", name=name).evaluate(
                "b => getComputedStyle(b).backgroundColor"
            )
            for name in ("Resume", "Pause")
        )
        assert disabled != enabled and disabled == "rgba(0, 0, 0, 0)", (enabled, disabled)
        assert enabled_controls(page) == ["Resume", "Stop", "Re-run with the same settings"]
        live = status.evaluate("element => element.outerHTML")
        page.reload()
        assert status.evaluate("element => element.outerHTML") == live
        assert live == '<strong id="session-status" class="status status-paused">paused</strong>'
        assert enabled_controls(page) == ["Resume", "Stop", "Re-run with the same settings"]
        assert errors == []


def test_an_operator_that_ends_with_no_kernel_says_so_live_and_leaves_nothing_deciding(
    engineer: Membership, queued: OptimizationSession, chromium: Browser
) -> None:
    """The policy proposed nothing after a context was assembled, and the only operator ended
    with no correct kernel: its items said "deciding…" until a reload, and the session a green
    "finished" and nothing else."""
    assembled = {
        "operator": "gemm", "iteration": 4, "tokens": 900, "budget": 12000,
        "tokens_per_tier": {"hot": 900}, "cut": [], "hot_rules": [], "admitted": ["case:7"],
        "shortened": [], "retrieved": [{"key": "case:7", "kind": "case", "operator": "gelu",
                                        "similarity": 0.8, "value": 0.4}]}  # fmt: skip
    finished = {"operator": "gemm", "reason": "every strategy that applies has been tried",
                "rounds_used": 4, "best_case_id": None, "start_latency_ms": None,
                "best_latency_ms": None, "speedup_vs_start": None,
                "speedup_vs_reference": None}  # fmt: skip
    with live_session_page(chromium, engineer, queued) as (page, errors):
        in_another_thread(lambda: session_begin(queued))
        append = lambda kind, payload: in_another_thread(  # noqa: E731
            lambda: journal_append(session_id=queued.pk, kind=kind, payload=payload)
        )
        append("context_assembled", assembled)
        context = page.locator("#context")
        expect(context).to_contain_text("deciding…")
        append("operator_finished", finished)
        expect(context).to_contain_text("no proposal followed")  # live, without a reload
        expect(context).not_to_contain_text("deciding…")
        in_another_thread(lambda: session_finish(queued, "every operator finished"))
        expect(page.locator("#session-status")).to_have_text("finished")
        page.reload()
        expect(page.locator("#none-correct")).to_have_text(
            "with no correct kernel: no operator ended with one"
        )
        assert errors == []


def enabled_controls(page: Page) -> list[str]:
    buttons = page.locator(".controls button:enabled")
    return [text.strip() for text in buttons.all_inner_texts()]


def test_a_watcher_removed_from_the_team_is_told_and_the_page_stops_reconnecting(
    engineer: Membership, queued: OptimizationSession, chromium: Browser
) -> None:
    # the team keeps an admin (in another thread: Playwright's event loop forbids the ORM here)
    in_another_thread(lambda: MembershipFactory(team=engineer.team, role=Role.ADMIN))
    with live_session_page(chromium, engineer, queued) as (page, errors):
        live = page.locator("#live-status")

        user = engineer.user.username
        in_another_thread(lambda: atomic(membership_remove)(team=engineer.team, username=user))
        note = {"text": "after the removal"}
        in_another_thread(lambda: journal_append(session_id=queued.pk, kind="session_note",
                                                 payload=note))  # fmt: skip
        expect(live).to_have_text(CLOSED_OUT)
        page.wait_for_timeout(1500)  # a reconnection would have been tried after 0.5 s
        expect(live).to_have_text(CLOSED_OUT)
        assert page.locator('#event-log li[data-kind="session_note"]').count() == 0
        assert errors == []


@pytest.mark.parametrize("leave", ["removed", "signed out"])
def test_a_watcher_who_left_while_the_socket_was_down_is_told_when_it_reconnects(
    engineer: Membership, queued: OptimizationSession, chromium: Browser, leave: str
) -> None:
    """Refused at the handshake, the reconnection reached the browser as 1006 (an abnormal
    closure), and the page said "reconnecting…" and tried again for ever."""
    in_another_thread(lambda: MembershipFactory(team=engineer.team, role=Role.ADMIN))
    with live_session_page(chromium, engineer, queued) as (page, errors):
        live = page.locator("#live-status")
        page.evaluate("window.kopeSessionLive.drop(2000)")
        expect(live).to_have_text("reconnecting…")
        if leave == "removed":
            user = engineer.user.username
            in_another_thread(lambda: atomic(membership_remove)(team=engineer.team, username=user))
        else:  # the login expired or was ended in another tab
            page.context.clear_cookies()
        expect(live).to_have_text(CLOSED_OUT, timeout=15_000)
        if leave == "signed out":  # the link signs in and comes back to the session
            session_url = page.url
            live.get_by_role("link", name="Log in again").click()
            submit_login(page, engineer)
            expect(page).to_have_url(session_url)
            expect(page.locator("#live-status")).to_have_text("live")
        assert errors == []
