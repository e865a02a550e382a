"""What a keyboard-only or screen-reader user meets, read as Chromium gives it to a screen
reader (its accessibility tree, names, descriptions, live regions, focus) rather than from the
markup: what changes by itself (a session's status and events, search results, an export that
ends) is announced politely by a region that stays on the page; a part that refreshes itself
(the exports list, the operators and attempts tables, profiles, an import's progress) leaves
focus where it was; each control has a name saying what it acts on, and its help text and
error as its description; and the review page's one-letter keys act only in the queue."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Page, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation, KernelTrial
from apps.devices.services import evaluation_execute, evaluation_record, evaluation_request
from apps.memory.compare_views import profile_start
from apps.memory.journal import journal_append
from apps.memory.models import Case, Rule
from apps.memory.rules import Wording, rule_propose
from apps.operators.models import ImportRun, OperatorVersion
from apps.reports.models import Export
from apps.reports.views import LISTED
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import MembershipFactory, TeamFactory, stored_builtin
from tests.memory.test_compare_pages import recorded_case, small_vector_add, two_cases
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in
from .test_untrusted_text import in_another_thread

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]


@dataclass
class Team:
    admin: Membership
    sessions: list[OptimizationSession]
    rule: Rule

    def path(self, rest: str) -> str:
        return f"/t/{self.admin.team.slug}/{rest}"


@pytest.fixture
def team(transactional_db: None) -> Team:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    gemm = stored_builtin("gemm")
    admin = MembershipFactory(team=TeamFactory(slug="access", name="Access"), role=Role.ADMIN)
    sessions = [session_create(team=admin.team, user=None, operators=["gemm"], start=False)
                for _ in range(2)]  # fmt: skip
    evidence = {"operators": ["gemm", "relu", "softmax"], "adoptions": 3, "value": 0.3}
    rule = rule_propose(team=admin.team, source_key="case:1", evidence=evidence,
                        wording=Wording("Unroll every loop by 8", "short loops"))  # fmt: skip
    journal_append(session_id=sessions[0].pk, kind="context_assembled", payload={
        "operator": "gemm", "iteration": 0, "tokens": 300, "budget": 12000,
        "tokens_per_tier": {"hot": 100, "cold": 200}, "admitted": [], "shortened": [], "cut": [],
        "retrieved": [], "hot_rules": []})  # fmt: skip
    case = recorded_case(sessions[0], gemm, 0, None, "void gemm(void) {}", "start")
    incumbent(sessions[0].pk, case)
    return Team(admin=admin, sessions=sessions, rule=rule)


def incumbent(session_id: int, case: int) -> None:
    journal_append(session_id=session_id, kind="incumbent_replaced", payload={
        "operator": "gemm", "iteration": 0, "case_id": case, "previous_case_id": None,
        "latency_ms": 1.0, "previous_latency_ms": None})  # fmt: skip


@contextmanager
def admin_page(chromium: Browser, team: Team, path: str) -> Iterator[Page]:
    """`path` as the team's admin sees it, served by a Daphne of its own."""
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        log_in(page, url, team.admin, quote(path, safe="/"))  # its query, whole, is `next`
        yield page


@contextmanager
def session_page(chromium: Browser, team: Team) -> Iterator[Page]:
    """The team's first session's page once its socket is live."""
    with admin_page(chromium, team, team.path(f"sessions/{team.sessions[0].pk}/")) as page:
        expect(page.locator("#live-status")).to_have_text("live")
        yield page


def mark_shown(page: Page, selector: str) -> None:
    """Keep the element shown now, to tell when htmx has swapped another in its place."""
    page.evaluate("selector => { window.shown = document.querySelector(selector); }", selector)


def wait_until_swapped(page: Page, selector: str) -> None:
    page.wait_for_function("selector => document.querySelector(selector) !== window.shown",
                           arg=selector)  # fmt: skip


def live_region(page: Page, selector: str) -> dict[str, Any]:
    """The live-region properties Chromium gives a screen reader for the element: those of
    the element or of its nearest ancestor that is a live region; {} when it is in none."""
    client = page.context.new_cdp_session(page)
    query = f"document.querySelector({json.dumps(selector)})"
    found = client.send("Runtime.evaluate", {"expression": query})
    element = client.send("DOM.describeNode", {"objectId": found["result"]["objectId"]})
    tree = client.send("Accessibility.getFullAXTree")["nodes"]
    by_id = {node["nodeId"]: node for node in tree}
    node = next(n for n in tree if n.get("backendDOMNodeId") == element["node"]["backendNodeId"])
    while node is not None:
        properties = {p["name"]: p["value"].get("value") for p in node.get("properties", [])}
        if properties.get("live", "off") != "off":
            return {"role": node["role"]["value"], **properties}
        node = by_id.get(node.get("parentId", ""))
    return {}


def test_a_sessions_status_and_new_events_are_announced_politely(
    team: Team, chromium: Browser
) -> None:
    with session_page(chromium, team) as page:
        for status in ("#session-status", "#live-status"):
            region = live_region(page, status)
            assert region.get("live") == "polite", f"{status} changes silently: {region}"
            assert region.get("atomic") is True, f"{status} is read without its label: {region}"
        log = live_region(page, "#event-log")
        assert log.get("live") == "polite", f"new events arrive silently: {log}"
        # each new event is read on its own, not the whole log again, and the log stays a list
        assert log.get("atomic") is False and "additions" in log.get("relevant", ""), log
        expect(page.locator("#event-log")).to_have_role("list")


def test_every_bar_on_a_sessions_page_says_what_it_measures(team: Team, chromium: Browser) -> None:
    with session_page(chromium, team) as page:
        bars = page.get_by_role("progressbar")
        expect(bars).to_have_count(3)  # the tokens spent, and the context's two tiers
        for bar in bars.all():
            expect(bar).to_have_accessible_name(re.compile(r"\w"))


def test_each_report_form_field_is_described_by_its_help_text(
    team: Team, chromium: Browser
) -> None:
    with admin_page(chromium, team, team.path("reports/")) as page:
        helped = {
            "Make the report": {"session": "A suite session gives a suite report."},
            "Compare": {"a": "For example memory off.", "b": "For example memory on."},
            "Export the knowledge base": {},
            "Import": {"file": "A JSON knowledge-base export from another team."},
        }
        for button, help_texts in helped.items():
            form = page.locator("form").filter(has=page.get_by_role("button", name=button))
            fields = form.locator("select, input:not([type=hidden])")
            expect(fields).not_to_have_count(0)
            for field in fields.all():
                name = field.get_attribute("name")
                where = f"{name} in the {button!r} form"
                expect(field, where).to_have_accessible_description(help_texts.get(name, ""))


def test_each_report_forms_format_is_named_by_its_own_label(team: Team, chromium: Browser) -> None:
    """Three forms on one page each have a Format select: each is its own label's field."""
    with admin_page(chromium, team, team.path("reports/")) as page:
        ids = page.locator("form select, form input").evaluate_all("els => els.map(e => e.id)")
        assert len([i for i in ids if i]) == len({i for i in ids if i}), ids
        for button in ("Make the report", "Compare", "Export the knowledge base"):
            form = page.locator("form").filter(has=page.get_by_role("button", name=button))
            expect(form.get_by_role("combobox", name="Format")).to_have_count(1)


def test_a_token_name_refused_is_marked_invalid_and_described_by_its_error(
    team: Team, chromium: Browser
) -> None:
    with admin_page(chromium, team, "/accounts/tokens/") as page:
        name = page.get_by_role("textbox", name="Name")
        name.fill("   ")  # passes the browser's `required`; the server strips it to nothing
        page.get_by_role("button", name="Create token").click()
        expect(page.locator(".error")).to_have_text("This field is required.")
        expect(name).to_have_attribute("aria-invalid", "true")
        expect(name).to_have_accessible_description("This field is required.")


# Records the form a submit would send, and keeps the page where it is.
SUBMIT_SPY = """() => document.addEventListener("submit", (event) => {
  window.submitted = event.target.action;
  event.preventDefault();
}, true)"""


def test_the_review_pages_one_letter_keys_act_only_where_a_rule_has_focus(
    team: Team, chromium: Browser
) -> None:
    with admin_page(chromium, team, team.path("review/")) as page:
        card = page.locator(f'.rule-card[data-rule="{team.rule.pk}"]')
        expect(card).to_be_focused()
        page.evaluate(SUBMIT_SPY)

        # WCAG 2.1.4: a key typed anywhere else (a stray key, a speech command heard as
        # letters) must not approve the rule or move focus into the queue
        page.get_by_role("navigation", name="Filter by status").get_by_role("link").first.focus()
        for key in ("a", "j", "v"):
            page.keyboard.press(key)
            assert page.evaluate("window.submitted") is None, f"{key!r} outside the queue"
            expect(card).not_to_be_focused()

        card.focus()
        page.keyboard.press("a")
        assert page.evaluate("window.submitted").endswith(f"/review/{team.rule.pk}/approve/")


@pytest.fixture
def exporting(team: Team) -> Team:
    """A finished export, to download, and one still being made: the list refreshes itself;
    older ones fill a second page."""
    export = {"team": team.admin.team, "kind": Export.Kind.KNOWLEDGE, "format": "md"}
    Export.objects.bulk_create(Export(**export, status=Export.Status.FAILED)
                               for _ in range(LISTED))  # fmt: skip
    Export.objects.create(**export, status=Export.Status.DONE, filename="knowledge.md",
                          content=b"# Rules", size=7)  # fmt: skip
    Export.objects.create(**export, status=Export.Status.RUNNING, progress=10)
    return team


def test_a_link_focused_in_the_exports_list_keeps_focus_as_the_list_refreshes(
    exporting: Team, chromium: Browser
) -> None:
    with admin_page(chromium, exporting, exporting.path("reports/")) as page:
        for link in (page.get_by_role("link", name="knowledge.md"),
                     page.get_by_role("link", name="older")):  # fmt: skip
            link.focus()
            mark_shown(page, "#exports")
            wait_until_swapped(page, "#exports")
            # a keyboard user reading the list is not thrown back to the top of the page
            expect(link).to_be_focused()


def test_an_opened_incumbent_kernel_stays_open_and_focused_as_the_operators_refresh(
    team: Team, chromium: Browser
) -> None:
    session = team.sessions[0]
    with session_page(chromium, team) as page:
        kernel = page.locator("#operators details")
        summary = kernel.locator("summary")
        summary.focus()
        page.keyboard.press("Enter")
        expect(kernel).to_have_attribute("open", "")
        mark_shown(page, "#operators table")
        case = int(page.locator("#event-log a").first.inner_text().removeprefix("case "))
        in_another_thread(lambda: incumbent(session.pk, case))  # the table is fetched again
        wait_until_swapped(page, "#operators table")
        # the reader keeps their place: the kernel they opened, with focus where it was
        expect(kernel).to_have_attribute("open", "")
        expect(summary).to_be_focused()


# The live regions on the page now, kept to see which of them are still there later.
LIVE_REGIONS = """() => { window.regions = [...document.querySelectorAll(
  '[aria-live], [role=status], [role=log], [role=alert]')]; }"""


def regions_kept(page: Page) -> list[str]:
    """The text of the live regions LIVE_REGIONS found that are still on the page."""
    texts: list[str] = page.evaluate(
        "() => window.regions.filter((r) => r.isConnected).map((r) => r.textContent)"
    )
    return texts


def test_what_a_knowledge_base_search_found_is_announced(team: Team, chromium: Browser) -> None:
    with admin_page(chromium, team, team.path("knowledge/")) as page:
        page.evaluate(LIVE_REGIONS)
        mark_shown(page, "#results")
        page.get_by_label("Kind").select_option("rule")
        page.get_by_role("button", name="Search").click()  # htmx swaps the results in place
        wait_until_swapped(page, "#results")
        found = "No item matches these filters."  # the team's memory holds no rule yet
        expect(page.locator("#results")).to_contain_text(found)
        # a live region announces a change only if it was there before the change
        kept = regions_kept(page)
        assert any(found in text for text in kept), kept
        expect(page.get_by_role("status")).to_have_text(f"Nothing here yet: {found}")


@pytest.fixture
def accounts(team: Team) -> tuple[Team, list[str], list[str]]:
    """A second member, and two API tokens of the admin's."""
    viewer = MembershipFactory(team=team.admin.team, role=Role.VIEWER)
    tokens = ["ci-nightly", "laptop"]
    for name in tokens:
        api_token_create(user=team.admin.user, name=name)
    return team, [team.admin.user.username, viewer.user.username], tokens


def test_each_remove_and_revoke_button_names_whom_or_what_it_acts_on(
    accounts: tuple[Team, list[str], list[str]], chromium: Browser
) -> None:
    team, usernames, tokens = accounts
    with admin_page(chromium, team, f"/accounts/teams/{team.admin.team.slug}/members/") as page:
        # tabbing through the table, a screen-reader user hears the button, not its row
        for username in usernames:
            remove = page.get_by_role("button", name=f"Remove {username}", exact=True)
            expect(remove).to_be_visible()
        page.goto(page.url.replace(f"teams/{team.admin.team.slug}/members/", "tokens/"))
        for name in tokens:
            expect(page.get_by_role("button", name=f"Revoke {name}", exact=True)).to_be_visible()


def test_each_review_cards_controls_name_their_rule(team: Team, chromium: Browser) -> None:
    rule = team.rule.pk
    with admin_page(chromium, team, team.path("review/")) as page:
        # a queue of cards each with "Approve v1", "Veto reason" and "Veto": which rule's?
        for role, name in (("button", f"Approve v1 of rule {rule}"),
                           ("textbox", f"Veto reason for rule {rule}"),
                           ("button", f"Veto rule {rule}")):  # fmt: skip
            expect(page.get_by_role(role, name=name, exact=True)).to_be_visible()


def another_case(session: OptimizationSession) -> None:
    gemm = OperatorVersion.objects.get(operator__slug="gemm")
    recorded_case(session, gemm, 1, None, "void gemm(void) { /* tiled */ }", "tile")


def test_a_link_focused_in_the_attempts_table_keeps_focus_as_cases_arrive(
    team: Team, chromium: Browser
) -> None:
    session = team.sessions[0]
    with session_page(chromium, team) as page:
        page.get_by_text("Every attempt as a table").click()
        rows = page.locator("#latency-table tbody tr")
        expect(rows).to_have_count(1)
        first = rows.first.get_by_role("link")
        first.focus()
        in_another_thread(lambda: another_case(session))  # the chart and table are drawn again
        expect(rows).to_have_count(2)
        # a reader going down the table is not thrown back to the top of the page
        expect(first).to_be_focused()


@pytest.fixture
def half_profiled(team: Team) -> tuple[Team, int, int]:
    """Two measured cases: A profiled, B's profile on its way (the page polls for it)."""
    admin = team.admin
    a, b = two_cases(admin.team, small_vector_add(), evaluate=True)
    evaluation_execute(profile_start(admin.team, Case.objects.get(pk=a), admin.user).pk,
                       max_attempts=1)  # fmt: skip
    profile_start(admin.team, Case.objects.get(pk=b), admin.user)  # no worker takes it
    return team, a, b


def test_a_focused_profile_link_keeps_focus_while_the_other_profile_is_made(
    half_profiled: tuple[Team, int, int], chromium: Browser
) -> None:
    team, a, b = half_profiled
    with admin_page(chromium, team, team.path(f"compare/?a={a}&b={b}")) as page:
        trace = page.get_by_role("link", name="Chrome Trace JSON")
        expect(trace).to_have_count(1)
        trace.focus()
        mark_shown(page, "#profiles")
        wait_until_swapped(page, "#profiles")
        expect(trace).to_be_focused()


@pytest.fixture
def importing(team: Team) -> tuple[Team, int]:
    """An import still running, one operator of it imported already."""
    line = {"problem": "1_gemm.py", "outcome": "imported", "operator": "gemm", "version": 1,
            "reason": ""}  # fmt: skip
    run = ImportRun.objects.create(team=team.admin.team, path="/imports/kb", format="kernelbench",
                                   status="running", total=2, done=1, report=[line])  # fmt: skip
    return team, run.pk


def test_a_focused_operator_link_keeps_focus_while_an_import_runs(
    importing: tuple[Team, int], chromium: Browser
) -> None:
    team, run = importing
    with admin_page(chromium, team, team.path(f"imports/{run}/")) as page:
        operator = page.get_by_role("link", name="gemm v1")
        operator.focus()
        mark_shown(page, "#import-progress")
        wait_until_swapped(page, "#import-progress")
        expect(operator).to_be_focused()


def export_ends() -> None:
    Export.objects.filter(status=Export.Status.RUNNING).update(
        status=Export.Status.DONE, progress=100, filename="rules.json", content=b"{}", size=2
    )


def test_an_export_that_ends_while_the_page_is_open_is_announced(
    exporting: Team, chromium: Browser
) -> None:
    with admin_page(chromium, exporting, exporting.path("reports/")) as page:
        page.evaluate(LIVE_REGIONS)
        in_another_thread(export_ends)
        expect(page.get_by_role("link", name="rules.json")).to_be_visible()  # the list refreshed
        # a screen-reader user waiting for the file is told, by a region that was there before
        kept = regions_kept(page)
        assert any(re.search(r"Export #\d+ is ready: rules\.json\.", text) for text in kept), kept


@pytest.fixture
def trial(team: Team) -> tuple[Team, int]:
    """A kernel the admin brought to gemm's page, still queued."""
    gemm = OperatorVersion.objects.get(operator__slug="gemm")
    evaluation, _ = evaluation_request(version=gemm, source_text="void gemm(void) {}",
                                       options=EvalSettings(), team=team.admin.team)  # fmt: skip
    kernel = KernelTrial.objects.create(team=team.admin.team, evaluation=evaluation, name="mine.c")
    return team, kernel.pk


def verdict_recorded() -> None:
    environment = {"compiler": "gcc", "cpu_model": "cpu", "threads": 1, "flags": ["-O2"]}
    evaluation_record(Evaluation.objects.get(), {"status": "correct", "environment": environment})


def test_a_verdict_that_arrives_while_its_page_is_open_is_announced_politely(
    trial: tuple[Team, int], chromium: Browser
) -> None:
    team, kernel = trial
    with admin_page(chromium, team, team.path(f"operators/gemm/evaluations/{kernel}/")) as page:
        expect(page.locator("#live-status")).to_have_text("Live updates: connected.")
        for status in ("#trial-status", "#live-status"):
            region = live_region(page, status)
            assert region.get("live") == "polite", f"{status} changes silently: {region}"
            assert region.get("atomic") is True, f"{status} is read without its label: {region}"
        page.evaluate(LIVE_REGIONS)
        in_another_thread(verdict_recorded)
        expect(page.locator("#trial-verdict")).to_have_text("CORRECT")
        # told by a region that was on the page before, not one that came with the verdict
        assert any("verdict CORRECT" in text for text in regions_kept(page)), regions_kept(page)
