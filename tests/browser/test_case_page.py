"""Numbers that agree, in Chromium: a case whose verdict a re-run reused says so on its page,
and is measured again from there by a real device worker, the new figures filling in without
a reload; an incumbent that reads slower than the fastest correct case says which comparison
made it, on the session page and in the report, which shows both."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.memory.journal import journal_append
from apps.reports.services import export_request
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import NAIVE, evaluated, recorded_case, small_vector_add
from tests.processes import celery_worker, daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in, script_errors

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]


@dataclass
class Reused:
    engineer: Membership
    first: int
    again: int  # the re-run's case, whose verdict is the first one's


@pytest.fixture
def reused(transactional_db: None) -> Reused:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="again", name="Again")
    engineer = MembershipFactory(team=team, role=Role.ENGINEER)
    version = small_vector_add()
    evaluation = evaluated(team, version, NAIVE)
    runs = [OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
            for _ in range(2)]  # fmt: skip
    first, again = (recorded_case(run, version, 0, None, NAIVE, "starting kernel", evaluation)
                    for run in runs)  # fmt: skip
    return Reused(engineer, first, again)


def test_a_reused_verdict_says_so_and_is_measured_again_from_the_page(
    reused: Reused, chromium: Browser
) -> None:
    env = process_env("single-machine")
    with daphne(env) as url, celery_worker(env, "device.cpu", "device@again"):
        # on a phone, in the dark: the table of measurements scrolls in its own box
        page = chromium.new_page(viewport={"width": 390, "height": 900}, color_scheme="dark")
        errors = script_errors(page)
        log_in(page, url, reused.engineer, f"/t/again/cases/{reused.again}/")
        note = page.locator("#verdict-reused")
        expect(note).to_contain_text(f"Reused from case #{reused.first}")
        note.get_by_role("link", name="measure it again").click()
        page.get_by_role("button", name="Measure again").click()
        # queued, then measured by the device worker; the section fills in as it polls
        row = page.locator("table.measurements tbody tr").first
        expect(row).to_contain_text("done", timeout=60_000)
        expect(row).to_contain_text(" ms")
        expect(row).to_contain_text("x")
        expect(page.get_by_role("button", name="Measure again")).to_be_visible()
        expect(page.locator("#verdict-reused")).to_be_visible()  # the verdict stays the first's
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        assert errors == []


@dataclass
class Overtaken:
    engineer: Membership
    session: int
    fastest: int  # the first correct case: fastest in its own evaluation
    incumbent: int  # its child: slower as read minutes later, faster timed beside it
    export: int


@pytest.fixture
def overtaken(transactional_db: None) -> Overtaken:
    """A run where the incumbent is not the fastest reading: what the loop records when a
    child beats its parent side by side but reads slower than the parent's own evaluation."""
    team = TeamFactory(slug="agree", name="Agree")
    engineer = MembershipFactory(team=team, role=Role.ENGINEER)
    version = small_vector_add()
    slug = version.operator.slug
    session = session_create(team=team, user=engineer.user, operators=[slug], memory_mode="off",
                             start=False)  # fmt: skip
    first = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 0, "version_id": version.pk, "target": "cpu-c", "strategy": "starting kernel",
        "outcome": "no_change", "correct": True, "latency_ms": 5.465})  # fmt: skip
    journal_append(session_id=session.pk, kind="incumbent_replaced", payload={
        "operator": slug, "iteration": 0, "case_id": first.pk, "previous_case_id": None,
        "latency_ms": 5.465, "previous_latency_ms": None})  # fmt: skip
    second = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 1, "version_id": version.pk, "target": "cpu-c", "strategy": "unroll by 4",
        "outcome": "improved", "correct": True, "latency_ms": 7.869, "parent_case_id": first.pk,
        "speedup_vs_parent": 1.21})  # fmt: skip
    journal_append(session_id=session.pk, kind="incumbent_replaced", payload={
        "operator": slug, "iteration": 1, "case_id": second.pk, "previous_case_id": first.pk,
        "latency_ms": 7.869, "previous_latency_ms": 5.465})  # fmt: skip
    journal_append(session_id=session.pk, kind="operator_finished", payload={
        "operator": slug, "reason": "round budget spent", "rounds_used": 2,
        "best_case_id": second.pk, "start_latency_ms": 5.465, "best_latency_ms": 7.869,
        "speedup_vs_start": 5.465 / 7.869, "speedup_vs_reference": None})  # fmt: skip
    OptimizationSession.objects.filter(pk=session.pk).update(status="finished")
    export = export_request(team=team, user=engineer.user, kind="session", fmt="html",
                            params={"session": session.pk})  # fmt: skip
    return Overtaken(engineer, session.pk, first.pk, second.pk, export.pk)


def test_the_page_and_the_report_say_which_comparison_made_the_incumbent(
    overtaken: Overtaken, chromium: Browser
) -> None:
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        errors = script_errors(page)
        log_in(page, url, overtaken.engineer, f"/t/agree/sessions/{overtaken.session}/")
        expect(page.locator("#event-log")).to_contain_text(
            f"new incumbent, case {overtaken.incumbent}: faster than its parent timed beside it "
            "(7.869 ms here; the incumbent read 5.465 ms in its own, earlier evaluation)"
        )
        report = page.request.get(f"{url}/t/agree/reports/{overtaken.export}/download/")
        assert report.ok, report.status
        shown = chromium.new_page()  # the report as its reader opens it, from the file
        shown.set_content(report.text())
        per_operator = shown.get_by_role("table").filter(has_text="fastest correct ms")
        row = per_operator.get_by_role("row").filter(has_text="vector_add_small")
        cells = row.get_by_role("cell")
        expect(cells.nth(3)).to_have_text("7.8690")  # the incumbent, as read in its evaluation
        expect(cells.nth(4)).to_have_text(f"5.4650 (case {overtaken.fastest})")  # fastest correct
        assert errors == []
