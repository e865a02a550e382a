"""Every page a team member reaches by following links, in Chromium: each answers below 400,
throws no script error, logs no console error (a CSP violation is one), loads every script,
style, image and fetch it asks for, and has no violation axe-core finds of WCAG 2.0-2.2 A/AA
or of its best practices, of any impact. An admin and a viewer each crawl breadth-first from
the team's sessions page; the viewer reads in the dark colour scheme, so both schemes'
contrast is checked without a third crawl."""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import axe_playwright_python
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Response

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.devices.models import KernelTrial
from apps.devices.services import evaluation_execute
from apps.memory.coldstart.vectors import cold_start_vectors_store
from apps.memory.compare_views import profile_start
from apps.memory.models import Case
from apps.memory.rules import rule_approve
from apps.operators.models import ImportRun
from apps.operators.services import suite_set
from apps.reports.services import export_request
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import (
    NAIVE,
    VECTORIZED,
    evaluated,
    recorded_case,
    small_vector_add,
)
from tests.memory.test_knowledge_pages import LOOP_ORDER, TILING, propose
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, submit_login

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
AXE_SCRIPT = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text()
AXE_RULE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
AXE_OPTIONS = {"runOnly": {"type": "tag", "values": AXE_RULE_TAGS},
               "resultTypes": ["violations"]}  # fmt: skip
SUB_RESOURCES = {"script", "stylesheet", "image", "font", "fetch", "xhr"}
MAX_PAGES = 60
MAX_PAGES_PER_KIND = 3  # cases/1/, cases/2/, ?open=…, ?view=…: a few of each, not all
# Downloads are checked by status only; following them would only save a file.
DOWNLOAD_SUFFIXES = ("/download/", "/trace.json")
NOT_FOLLOWED = ("/accounts/logout/", "/admin/")


@dataclass
class PopulatedTeam:
    slug: str
    members: dict[Role, Membership]


@pytest.fixture
def populated(transactional_db: None) -> PopulatedTeam:
    """A team with a session of measured cases (one profiled, one also brought to its
    operator's page), a pending and an approved rule (so hot memory holds one), the targets'
    documents, a suite, a finished import and two exports.
    Made before Chromium starts: Playwright's event loop forbids the ORM in this thread."""
    team = TeamFactory(slug="everything", name="Everything")
    members = {role: MembershipFactory(team=team, role=role) for role in (Role.ADMIN, Role.VIEWER)}
    admin = members[Role.ADMIN].user
    version = small_vector_add()
    session = session_create(team=team, user=admin, operators=[version.operator.slug],
                             memory_mode="off", start=False)  # fmt: skip
    naive = evaluated(team, version, NAIVE)
    first = recorded_case(session, version, 0, None, NAIVE, "starting kernel", naive)
    KernelTrial.objects.create(team=team, evaluation=naive, name="naive.c", created_by=admin)
    second = recorded_case(session, version, 1, first, VECTORIZED, "vectorize the loop",
                           evaluated(team, version, VECTORIZED))  # fmt: skip
    OptimizationSession.objects.filter(pk=session.pk).update(status="finished")
    profiling = profile_start(team, Case.objects.get(pk=second), admin)
    evaluation_execute(profiling.pk, max_attempts=1)

    propose(team, f"case:{second}", TILING)
    approved = propose(team, f"case:{first}", LOOP_ORDER)
    rule_approve(rule=approved, user=admin, version_number=1)
    cold_start_vectors_store()  # the knowledge base lists the targets' documents

    suite_set(team=team, slug="adds", name="Adds", operators=[version.operator])
    imported = {"operator": "relu", "outcome": "imported", "reason": ""}
    ImportRun.objects.create(team=team, created_by=admin, path="/imports/kb", format="kernelbench",
                             status="done", total=1, done=1, report=[imported])  # fmt: skip
    export_request(team=team, user=admin, kind="session", fmt="html",
                   params={"session": session.pk})  # fmt: skip
    export_request(team=team, user=admin, kind="knowledge", fmt="md", params={})
    return PopulatedTeam(slug=team.slug, members=members)


@dataclass
class PageProblems:
    """What went wrong on the page being visited, filled in by the page's event handlers."""

    url: str = ""
    found: list[str] = field(default_factory=list)
    # Pages that answer an error status on purpose (an error page, a form sent back): Chromium
    # logs that status as a console error, which says nothing about the page.
    expected_errors: set[str] = field(default_factory=set)

    def add(self, what: str) -> None:
        self.found.append(f"{self.url}: {what}")

    def on_console(self, message: ConsoleMessage) -> None:
        expected = (message.location.get("url") in self.expected_errors
                    and message.text.startswith("Failed to load resource"))  # fmt: skip
        if message.type == "error" and not expected:
            self.add(f"console error: {message.text} (at {message.location.get('url')})")

    def on_page_error(self, error: Exception) -> None:
        self.add(f"uncaught exception: {error}")

    def on_request_failed(self, request: Request) -> None:
        # Aborted: the crawl moved on before it loaded (the favicon, a poll); a missing file
        # answers 404 instead, which on_response reports.
        if request.resource_type in SUB_RESOURCES and request.failure != "net::ERR_ABORTED":
            self.add(f"{request.resource_type} {request.url} failed: {request.failure}")

    def on_response(self, response: Response) -> None:
        if response.request.resource_type in SUB_RESOURCES and response.status >= 400:
            self.add(f"{response.request.resource_type} {response.url} answered {response.status}")


def watched_page(browser: Browser, problems: PageProblems, scheme: str, width: int = 1280) -> Page:
    page = browser.new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page.on("console", problems.on_console)
    page.on("pageerror", problems.on_page_error)
    page.on("requestfailed", problems.on_request_failed)
    page.on("response", problems.on_response)
    return page


def log_in(page: Page, problems: PageProblems, url: str, membership: Membership, path: str
           ) -> None:  # fmt: skip
    visit(page, problems, f"{url}/accounts/login/?next={path}")
    submit_login(page, membership)
    page.wait_for_url(f"{url}{path}")


def accessibility_violations(page: Page) -> list[str]:
    """axe-core's violations, of any impact, each with the elements at fault.
    Injected through the DevTools protocol, which the page's CSP does not govern."""
    page.evaluate(AXE_SCRIPT)
    results = page.evaluate("options => axe.run(document, options)", AXE_OPTIONS)
    return [
        f"axe {violation['id']} ({violation['impact']}): {violation['help']} at "
        f"{node['target']}: {node['failureSummary']}"
        for violation in results["violations"]
        for node in violation["nodes"]
    ]


def links_on(page: Page) -> list[str]:
    hrefs: list[str] = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
    return [urldefrag(href).url.removesuffix("?") for href in hrefs]  # "?": the page itself


def is_download(url: str) -> bool:
    return urlparse(url).path.endswith(DOWNLOAD_SUFFIXES)


PageCheck = Callable[[Page], list[str]]


def visit(page: Page, problems: PageProblems, url: str,
          check: PageCheck = accessibility_violations) -> None:  # fmt: skip
    """Open `url` and check what its loading could not: its status and, by default, its
    accessibility."""
    problems.url = url
    response = page.goto(url)
    assert response is not None, url
    if response.status >= 400:
        problems.add(f"answered {response.status}")
    for problem in check(page):
        problems.add(problem)


def page_kind(url: str) -> str:
    """The URL's path with its ids and keys as `*`: /t/x/cases/*/, /t/x/knowledge/documents/*/"""
    segments = urlparse(url).path.split("/")
    return "/".join("*" if re.search(r"[0-9:]", segment) else segment for segment in segments)


def crawl(page: Page, problems: PageProblems, origin: str, start: str,
          check: PageCheck = accessibility_violations) -> list[str]:  # fmt: skip
    """Visit same-origin pages breadth-first from `start`, each checked by `check`; return the
    URLs visited."""
    queue, seen, per_kind = deque([start]), {start}, Counter[str]()
    visited: list[str] = []
    while queue and len(visited) < MAX_PAGES:
        url = queue.popleft()
        problems.url = url
        if is_download(url):
            status = page.request.get(url).status
            if status >= 400:
                problems.add(f"download answered {status}")
            visited.append(url)
            continue
        visit(page, problems, url, check)
        visited.append(url)
        for link in links_on(page):
            kind = page_kind(link)
            if (link in seen or not link.startswith(origin)
                    or urlparse(link).path.startswith(NOT_FOLLOWED)
                    or per_kind[kind] >= MAX_PAGES_PER_KIND):  # fmt: skip
                continue
            seen.add(link)
            per_kind[kind] += 1
            queue.append(link)
    return visited


def sideways_scroll(page: Page) -> list[str]:
    """On a phone's width the page itself never scrolls sideways: a wide table or block of code
    scrolls in its own box."""
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    return [f"the page scrolls {overflow} px sideways"] if overflow > 0 else []


def accessible_on_a_phone(page: Page) -> list[str]:
    return accessibility_violations(page) + sideways_scroll(page)


def crawl_as(
    populated: PopulatedTeam,
    role: Role,
    scheme: str,
    chromium: Browser,
    check: PageCheck = accessibility_violations,
    width: int = 1280,
) -> tuple[list[str], list[str]]:
    """Log in as the team's `role` member, in the `scheme` colour scheme, on a screen `width`
    pixels wide, and crawl from the team's sessions page, each page checked by `check`: the
    URLs visited, and the problems."""
    start_path = f"/t/{populated.slug}/sessions/"
    with daphne(process_env("single-machine")) as url:
        problems = PageProblems()
        page = watched_page(chromium, problems, scheme, width)
        log_in(page, problems, url, populated.members[role], start_path)
        visited = crawl(page, problems, url, f"{url}{start_path}", check)
    return visited, problems.found


# The viewer reads on a phone (390 px), in the dark scheme: both schemes' contrast and the
# narrow layout are checked without a third crawl.
@pytest.mark.parametrize(
    ("role", "scheme", "width", "check"),
    [(Role.ADMIN, "light", 1400, accessibility_violations),
     (Role.VIEWER, "dark", 390, accessible_on_a_phone)],
)  # fmt: skip
def test_every_page_a_member_reaches_is_whole_and_accessible(
    populated: PopulatedTeam, role: Role, scheme: str, width: int, check: PageCheck,
    chromium: Browser,
) -> None:  # fmt: skip
    visited, problems = crawl_as(populated, role, scheme, chromium, check, width)
    print(f"{len(visited)} pages:", *visited, sep="\n")
    assert len(visited) >= 20, visited  # the crawl really went through the team's pages
    assert problems == [], "\n".join(problems)
