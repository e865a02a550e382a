"""A failed htmx request is said on the page (static/js/request-errors.js): htmx swaps in only
a 2xx answer, so a refused "Check workers" or a server gone away looked like a dead button."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session
from playwright.sync_api import Browser, Page, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_forest_pages import small_forest
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in, script_errors, submit_login
from .test_untrusted_text import in_another_thread

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]


@pytest.fixture
def engineer(transactional_db: None) -> Membership:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="oops", name="Oops <b>team</b>")
    return MembershipFactory(team=team, role=Role.ENGINEER)


def open_workers_page(page: Page, url: str, membership: Membership) -> None:
    log_in(page, url, membership, "/t/oops/workers/")
    expect(page.get_by_role("button", name="Check workers")).to_be_visible()
    expect(page.get_by_role("alert")).to_be_empty()


def test_a_check_refused_since_the_page_opened_says_why(
    engineer: Membership, chromium: Browser
) -> None:
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        open_workers_page(page, url, engineer)
        in_another_thread(
            lambda: Membership.objects.filter(pk=engineer.pk).update(role=Role.VIEWER)
        )

        page.get_by_role("button", name="Check workers").click()
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("“Check workers” was refused (403 Forbidden)")
        expect(alert).to_contain_text(
            "Your role in Oops <b>team</b> is viewer; this needs the run permission."
        )
        expect(alert.locator("b")).to_have_count(0)  # a team's name is text, never markup
        expect(page.locator("#check-status")).to_be_empty()

        page.get_by_role("button", name="Dismiss").click()
        expect(alert).to_be_empty()


def test_a_check_sent_to_a_stopped_server_says_it_could_not_be_reached(
    engineer: Membership, chromium: Browser
) -> None:
    page = chromium.new_page()
    errors = script_errors(page)
    with daphne(process_env("single-machine")) as url:
        open_workers_page(page, url, engineer)

    page.get_by_role("button", name="Check workers").click()
    expect(page.get_by_role("alert").locator("p")).to_have_text(
        "“Check workers” failed: the server could not be reached. Check the connection, or "
        "whether the workbench is running, and try again."
    )
    assert not [e for e in errors if "Content Security Policy" in e]


def test_a_check_sent_after_the_session_ended_says_to_log_in_again(
    engineer: Membership, chromium: Browser
) -> None:
    """The refusal is a redirect to the login page, which the browser follows: htmx got a 200
    and put the whole login page inside the check's status line."""
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        open_workers_page(page, url, engineer)
        in_another_thread(lambda: Session.objects.all().delete())  # logged out in another tab

        page.get_by_role("button", name="Check workers").click()
        alert = page.get_by_role("alert")
        expect(alert.locator("p")).to_have_text(
            "“Check workers” was not done: you are not logged in any more. Log in again"
        )
        expect(page.locator("#check-status")).to_be_empty()
        alert.get_by_role("link", name="Log in again").click()
        submit_login(page, engineer)
        expect(page).to_have_url(f"{url}/t/oops/workers/")


@pytest.fixture
def forest_viewer(transactional_db: None) -> Membership:
    team = TeamFactory(slug="trees", name="Trees")
    small_forest(team)
    return MembershipFactory(team=team, role=Role.VIEWER)


def test_a_branch_expanded_after_leaving_the_team_says_not_found(
    forest_viewer: Membership, chromium: Browser
) -> None:
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        log_in(page, url, forest_viewer, "/t/trees/forest/")
        in_another_thread(lambda: Membership.objects.filter(pk=forest_viewer.pk).delete())

        page.get_by_role("link", name="expand (2)").click()
        expect(page.get_by_role("alert").locator("p")).to_have_text(
            "“expand (2)” was refused (404 Not Found): Not found. No team 'trees'."
        )
        expect(page.get_by_role("link", name="expand (2)")).to_be_visible()

        # An answer in the API's error format says its message.
        page.evaluate("() => { htmx.ajax('GET', '/api/none', {source: '#main', swap: 'none'}); }")
        expect(page.get_by_role("alert").locator("p")).to_have_text(
            "A request was refused (404 Not Found): No API endpoint at /api/none; /api/docs "
            "lists them."
        )


def test_the_api_docs_work_offline_under_the_content_security_policy(
    engineer: Membership, chromium: Browser
) -> None:
    """Swagger UI came from a CDN, which the CSP blocks (and an offline host cannot reach):
    the page was blank. Every request it makes now stays on this server."""
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        errors = script_errors(page)
        elsewhere: list[str] = []
        page.on("request", lambda r: None if r.url.startswith(url) else elsewhere.append(r.url))
        log_in(page, url, engineer, "/api/docs")

        expect(page.locator(".opblock-summary-path").first).to_be_visible(timeout=15_000)
        assert page.locator(".opblock").count() > 20  # every operation, listed by tag
        assert errors == [] and elsewhere == []
        answer = page.request.get(f"{url}/api/teams/")  # a slash too many
        assert answer.status == 404 and answer.json()["error"]["message"] == (
            "No API endpoint at /api/teams/: API paths end without a slash (/api/teams)."
        )
