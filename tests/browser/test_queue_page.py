"""A queued session in Chromium: its page and the sessions list say where it stands in line and
why it waits, the page follows the line as it moves, and the launch page counts the sessions
ahead in its estimate. Real Daphne, real channel layer; no agent worker takes the sessions, so
they stay queued until the test moves them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.runs.config import Budgets
from apps.runs.loop import session_begin
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create, session_pause
from tests.factories import MembershipFactory, TeamFactory, stored_builtin
from tests.processes import daphne
from tests.runs.test_estimate import TIMES, finished_session
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in, script_errors
from .test_untrusted_text import in_another_thread

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "var" / "test" / "launch-page.png"


@dataclass
class Line:
    engineer: Membership
    ahead: OptimizationSession
    waiting: OptimizationSession


@pytest.fixture
def line(transactional_db: None) -> Line:
    """Two sessions launched one after the other (their messages sent, no worker to take
    them). Made before Chromium starts: Playwright's event loop forbids the ORM here."""
    relu = stored_builtin("relu")
    engineer = MembershipFactory(team=TeamFactory(slug="line", name="Line"), role=Role.ENGINEER)
    finished_session(engineer.team, relu, rounds=2, seconds=60)  # 30 s a round, measured
    launch = lambda: session_create(team=engineer.team, user=None, operators=["relu"],  # noqa: E731
                                    budgets=Budgets(rounds=10))  # fmt: skip
    return Line(engineer, launch(), launch())


def test_a_queued_session_says_its_place_and_why_and_follows_the_line_live(
    line: Line, chromium: Browser
) -> None:
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        errors = script_errors(page)
        log_in(page, url, line.engineer, f"/t/line/sessions/{line.waiting.pk}/")
        place = page.locator("#queue-line")
        expect(place).to_contain_text("queued: 2nd in line")
        expect(place).to_contain_text(f"waiting behind session #{line.ahead.pk}, queued before it")
        expect(page.locator("#live-status")).to_have_text("live")

        in_another_thread(lambda: session_pause(session=line.ahead, user=None))
        expect(place).to_contain_text("queued: 1st in line")  # live, without a reload
        expect(place).to_contain_text("none is running an iteration now")

        page.reload()
        expect(place).to_contain_text("queued: 1st in line")
        page.goto(f"{url}/t/line/sessions/")
        row = page.get_by_role("row").filter(has_text=f"#{line.waiting.pk}")
        expect(row).to_contain_text("queued: 1st in line")
        expect(row).to_contain_text("waiting for an agent worker to take it")

        page.goto(f"{url}/t/line/sessions/{line.waiting.pk}/")
        expect(page.locator("#live-status")).to_have_text("live")
        in_another_thread(lambda: session_begin(line.waiting))  # a worker takes it
        expect(page.locator("#session-status")).to_have_text("running")
        expect(page.locator("#queue-line")).to_have_count(0)
        assert errors == []


def test_the_launch_estimate_counts_the_sessions_ahead_in_the_queue(
    line: Line, chromium: Browser
) -> None:
    in_another_thread(lambda: session_begin(line.ahead))  # one running, one queued
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        log_in(page, url, line.engineer, "/t/line/sessions/new/")
        page.locator("#id_operators").select_option("relu")
        page.locator("#id_rounds").fill("4")
        time = page.locator("#estimate-time")
        # 4 rounds x 30 s, + 2 x 10 rounds x 30 s for the two sessions ahead
        expect(time).to_have_text(
            f"Time: about 12 min: 4 rounds {TIMES} 30 s per round as measured over the last 1 "
            "finished session on this host (offline policy, cpu-c), + 10 min for the 2 "
            "sessions ahead in the queue (queued or running on this host, at most what their "
            "round budgets leave)."
        )  # fmt: skip
        page.screenshot(path=str(SCREENSHOT), full_page=True)
