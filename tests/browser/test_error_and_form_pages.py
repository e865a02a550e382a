"""The pages the crawl in test_every_page.py cannot reach by links, with its checks (no script
or console error, every sub-resource loaded, no axe-core violation of any impact): the
error pages (403, 404, 400, 500), each form sent back with what was wrong, the knowledge base
searched and filtered, and the htmx fragments a page loads after it. Each answers the status
expected and says what went wrong; an error page also has a heading, a language and a link
back to the workbench, and a field marked invalid is described by its error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import get_resolver
from playwright.sync_api import Browser, Locator, Page, Response, Route, expect

from apps.accounts.roles import Role
from apps.memory.models import Rule
from tests.factories import stored_builtin
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM
from .test_every_page import (
    PageCheck,
    PageProblems,
    PopulatedTeam,
    accessibility_violations,
    log_in,
    populated,  # noqa: F401
    watched_page,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
# The first search by meaning loads the embedding model in the web process: seconds, once.
FIRST_SEARCH_MS = 60_000
ERROR_PAGE_PARTS = """() => ({
  lang: document.documentElement.lang,
  heading: document.querySelector("h1") !== null,
  back: [...document.querySelectorAll("a[href]")].some((a) => new URL(a.href).pathname === "/"),
})"""
# Each field marked invalid names its error in aria-describedby, and no description names an
# element that is not on the page.
UNDESCRIBED_FIELDS = """() => {
  const problems = [];
  for (const element of document.querySelectorAll("[aria-describedby]")) {
    for (const id of element.getAttribute("aria-describedby").split(/\\s+/).filter(Boolean)) {
      if (!document.getElementById(id)) {
        problems.push(`#${element.id} is described by #${id}, which is not on the page`);
      }
    }
  }
  for (const field of document.querySelectorAll('[aria-invalid="true"]')) {
    const ids = (field.getAttribute("aria-describedby") || "").split(/\\s+/);
    if (!ids.some((id) => document.getElementById(id)?.classList.contains("errorlist"))) {
      problems.push(`#${field.id} is marked invalid but its error is not in its description`);
    }
  }
  return problems;
}"""


@dataclass
class Unlinked:
    """The team's pages that need an id or a slug to reach."""

    team: PopulatedTeam
    pending_rule: int
    own_operator: str  # one the team may edit (a shared one has no edit form)

    def path(self, rest: str) -> str:
        return f"/t/{self.team.slug}/{rest}"


@pytest.fixture
def unlinked(populated: PopulatedTeam) -> Unlinked:  # noqa: F811
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = populated.members[Role.ADMIN].team
    own = stored_builtin("cumsum", team)
    pending = Rule.objects.get(team=team, status=Rule.Status.PENDING)
    return Unlinked(team=populated, pending_rule=pending.pk, own_operator=own.operator.slug)


def error_page_parts(page: Page) -> list[str]:
    parts = page.evaluate(ERROR_PAGE_PARTS)
    missing = [] if parts["lang"] else ["no lang on <html>"]
    missing += [] if parts["heading"] else ["no <h1>"]
    missing += [] if parts["back"] else ["no link back to the workbench"]
    return missing + accessibility_violations(page)


def form_page_parts(page: Page) -> list[str]:
    return page.evaluate(UNDESCRIBED_FIELDS) + accessibility_violations(page)


@dataclass
class Visitor:
    """One browser page checked, after each answer, as the crawl checks its pages."""

    page: Page
    problems: PageProblems
    origin: str

    def expect(self, response: Response | None, status: int, says: str,
               check: PageCheck = accessibility_violations) -> None:  # fmt: skip
        assert response is not None
        self.problems.url = response.url
        if response.status != status:
            self.problems.add(f"answered {response.status}, not {status}")
        if says not in self.page.locator("body").inner_text():
            self.problems.add(f"does not say {says!r}")
        for problem in check(self.page):
            self.problems.add(problem)

    def about_to_load(self, url: str, status: int) -> None:
        self.problems.url = url
        if status >= 400:
            self.problems.expected_errors.add(url)

    def open(self, path: str, status: int, says: str,
             check: PageCheck = accessibility_violations) -> None:  # fmt: skip
        self.about_to_load(f"{self.origin}{path}", status)
        self.expect(self.page.goto(f"{self.origin}{path}"), status, says, check)

    def submit(self, button: Locator, status: int, says: str,
               check: PageCheck = form_page_parts) -> None:  # fmt: skip
        """Click `button` with the browser's own checks of the form off, so what the server
        says about the values is what shows (as it does for a browser without those checks)."""
        button.evaluate("button => { button.form.noValidate = true; }")
        self.about_to_load(button.evaluate("button => button.form.action"), status)
        with self.page.expect_navigation() as navigation:
            button.click()
        self.expect(navigation.value, status, says, check)

    def check_swapped_in(self, what: str) -> None:
        """After an htmx swap has settled: the page as it now is."""
        self.problems.url = f"{self.page.url} ({what})"
        for problem in accessibility_violations(self.page):
            self.problems.add(problem)


def visitor(chromium: Browser, origin: str, scheme: str, problems: PageProblems) -> Visitor:
    return Visitor(watched_page(chromium, problems, scheme), problems, origin)


def server_error_answer() -> HttpResponse:
    """What handler500 answers, called as Django calls it: while an exception from a view is
    being handled, DEBUG off. The app has no view that fails on purpose to show it for real."""
    handler: Callable[..., HttpResponse] = get_resolver().resolve_error_handler(500)
    try:
        raise RuntimeError("a view with a bug")
    except RuntimeError:
        return handler(RequestFactory().get("/t/everything/sessions/"))


def visit_error_pages(admin: Visitor, viewer: Visitor, unlinked: Unlinked) -> None:
    viewer.open(unlinked.path("sessions/new/"), 403, "You don't have permission for this",
                error_page_parts)  # fmt: skip
    admin.open(unlinked.path("cases/987654/"), 404, "No case 987654", error_page_parts)
    admin.open("/no/such/page/", 404, "No page at /no/such/page/", error_page_parts)
    admin.open(unlinked.path("knowledge/?target=cpu%00"), 400,
               "query.target holds a NUL character", error_page_parts)  # fmt: skip
    answer = server_error_answer()
    failing = f"{admin.origin}/a-view-with-a-bug/"

    def answer_as_django_did(route: Route) -> None:
        route.fulfill(status=answer.status_code, headers=dict(answer.items()),
                      body=answer.content)  # fmt: skip

    admin.page.route(failing, answer_as_django_did)
    admin.about_to_load(failing, 500)
    admin.expect(admin.page.goto(failing), 500, "Something went wrong on the server",
                 error_page_parts)  # fmt: skip
    admin.page.unroute(failing)


def send_forms_back(admin: Visitor, unlinked: Unlinked) -> None:
    page = admin.page
    admin.open(unlinked.path("sessions/new/"), 200, "Launch a session")
    page.get_by_label("Rounds").fill("0")
    admin.submit(page.get_by_role("button", name="Launch"), 400,
                 "Ensure this value is greater than or equal to 1.")  # fmt: skip

    operator = unlinked.path(f"operators/{unlinked.own_operator}/")
    admin.open(operator, 200, "Save as a new version")
    page.get_by_label("max abs error").fill("0")
    admin.submit(page.get_by_role("button", name="Save as a new version"), 400,
                 "Ensure this value is greater than or equal to 1e-12.")  # fmt: skip
    edit_to_an_older_version(admin, operator)

    admin.open(unlinked.path("imports/"), 200, "Import a folder on this server")
    page.get_by_label("Path").fill("/etc")
    admin.submit(page.get_by_role("button", name="Import"), 400,
                 "/etc is outside the import roots")  # fmt: skip

    admin.open(unlinked.path(f"review/{unlinked.pending_rule}/"), 200, "Decide")
    page.get_by_text("Edit, then approve").click()
    page.get_by_label("Statement").fill("Tile the k loop by 64")
    page.get_by_label("Applies when").fill("   ")
    admin.submit(page.get_by_role("button", name="Save as a new version and approve it"), 400,
                 "a rule needs a statement and the conditions it applies under")  # fmt: skip
    assert page.get_by_label("Statement").input_value() == "Tile the k loop by 64"  # kept


def edit_to_an_older_version(admin: Visitor, operator: str) -> None:
    """The page is open on the newest version when another tab saves a newer one: its edit is
    refused and kept in its form."""
    page = admin.page
    admin.open(operator, 200, "Save as a new version")
    form = page.locator("form[action$='/edit/']")
    values = form.evaluate("form => Object.fromEntries(new FormData(form))")
    saved = page.request.post(  # as another tab with the same page would save it
        form.evaluate("form => form.action"),
        form={**values, "description": "Saved first, in another tab"},
    )
    assert saved.ok and "Saved as version" in saved.text(), saved.status
    page.locator("#id_description").fill("Saved second, from the older page")
    admin.submit(page.get_by_role("button", name="Save as a new version"), 409,
                 "nothing was saved")  # fmt: skip
    expect(page.locator("#id_description")).to_have_value("Saved second, from the older page")


def log_in_wrongly(chromium: Browser, origin: str, problems: PageProblems) -> None:
    """Wrong passwords as one account until it is locked (KOPE_LOGIN_FAILURE_LIMIT, 5): the
    login page then says so, with a 429."""
    stranger = visitor(chromium, origin, "dark", problems)
    stranger.open("/accounts/login/", 200, "Log in")
    for attempt in range(1, 6):
        stranger.page.locator("#id_username").fill("admin")
        stranger.page.locator("#id_password").fill("not the password")
        status, says = (
            (200, "Please enter a correct username and password")
            if attempt < 5
            else (429, "Too many failed logins as 'admin' from your address")
        )
        stranger.submit(stranger.page.get_by_role("button", name="Log in"), status, says)
    stranger.page.close()


def search_the_knowledge_base(admin: Visitor, unlinked: Unlinked) -> None:
    page = admin.page
    admin.open(unlinked.path("knowledge/"), 200, "Knowledge base")
    page.get_by_role("searchbox").fill("cache blocking for matrix multiplication")
    page.get_by_role("button", name="Search").click()  # htmx: the hits, in place
    expect(page.locator("#results")).to_contain_text("hit(s) for", timeout=FIRST_SEARCH_MS)
    admin.check_swapped_in("the hits")
    admin.open(unlinked.path("knowledge/?q=loop+order&kind=rule&status=approved"), 200,
               "hit(s) for “loop order”")  # fmt: skip
    admin.open(unlinked.path("knowledge/?q=loop+order&kind=case&outcome=crashed"), 200,
               "No hits")  # fmt: skip


def load_fragments(admin: Visitor, unlinked: Unlinked) -> None:
    page = admin.page
    admin.open(unlinked.path("forest/"), 200, "Forest")
    page.locator("a.expand").first.click()
    expect(page.locator("a.expand")).to_have_count(0)
    admin.check_swapped_in("children opened")

    admin.open(unlinked.path("sessions/new/"), 200, "Pick operators or a suite")
    page.get_by_label("Operators").select_option(index=0)
    expect(page.locator("#estimate")).to_contain_text("Size of the run")
    admin.check_swapped_in("the estimate")

    admin.open(unlinked.path("sessions/"), 200, "Sessions")
    session = page.locator("td a[href*='/sessions/']").first.get_attribute("href")
    admin.open(str(session), 200, "Context of the latest iteration")
    for part, event in (("#operators", "kope:progress"), ("#context", "kope:context")):
        with page.expect_response(lambda r: "part=" in r.url) as polled:
            page.evaluate(
                f"document.body.dispatchEvent(new Event({event!r}))"
            )  # as a live event does
        assert polled.value.status == 200, part
        page.wait_for_load_state("networkidle")
        admin.check_swapped_in(f"{part} refreshed")


def test_pages_the_crawl_cannot_reach_by_links(unlinked: Unlinked, chromium: Browser) -> None:
    members = unlinked.team.members
    with daphne(process_env("single-machine")) as origin:
        problems = PageProblems()
        admin = visitor(chromium, origin, "light", problems)
        viewer = visitor(chromium, origin, "dark", problems)
        log_in(admin.page, problems, origin, members[Role.ADMIN], unlinked.path("sessions/"))
        log_in(viewer.page, problems, origin, members[Role.VIEWER], unlinked.path("sessions/"))
        visit_error_pages(admin, viewer, unlinked)
        send_forms_back(admin, unlinked)
        log_in_wrongly(chromium, origin, problems)
        search_the_knowledge_base(admin, unlinked)
        load_fragments(admin, unlinked)
    assert problems.found == [], "\n".join(problems.found)
