"""Untrusted text never becomes markup or script. A team whose every outside-written text
(operator name, description, reference and starting kernel; agent strategies, rationale and
source; compiler output; rule wording, comments and veto reasons; imported file and team
names; the team's own name) is a payload that would show if it were parsed as HTML is crawled
page by page in Chromium, with the htmx fragments, the charts' hover text, the diff, the
forest drawn on demand, the live event log and the HTML report. On each: no payload script
ran, no payload element or `javascript:` link exists, no console error (a CSP violation is
one: the markup got in even if the policy stopped it), and the payload reads as text."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from playwright.sync_api import Browser, Locator, Page, expect

from apps.accounts.models import Membership, Team
from apps.accounts.services import team_create
from apps.devices.services import kernel_source_store
from apps.memory.journal import journal_append
from apps.memory.models import Rule
from apps.memory.rules import Wording, rule_approve, rule_propose, rule_veto
from apps.memory.tasks import embed_rule
from apps.operators.models import ImportRun, OperatorVersion
from apps.operators.services import definition_of, version_store
from apps.reports.knowledge import ImportFileError
from apps.reports.services import export_request, knowledge_import
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import UserFactory
from tests.memory.test_compare_pages import NAIVE, small_vector_add
from tests.processes import daphne
from tests.reports.test_markdown import rendered, shown_text
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM
from .test_every_page import PageProblems, crawl, log_in, watched_page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
SHOWN = re.compile(r'id="pwned-([\w-]+)"')
# Every payload the team is seeded with (by its tag), each to be read as text somewhere.
SEEDED = {
    "team", "opname", "opdesc", "opref", "originpath", "startkernel", "label", "startstrategy",
    "brokenstrategy", "brokenkernel", "compileerror", "strategy", "fasterkernel", "why",
    "proposed", "toolsummary", "note",
    "pausereason", "statement", "applies", "notwhen", "vetoedstatement", "keptcomment",
    "vetoedcomment", "veto", "kbfile", "badkbfile", "kbslug", "kbname", "kbstatement",
    "kbapplies", "kbnotwhen", "kbdistilled", "importpath", "importfile", "importreason",
}  # fmt: skip
# Seeded but shown on no page (only in the JSON export): the proposal's rationale, and an
# imported rule's original source key and history.
LIVE = {"livestrategy", "livenote", "livecontext"}


def payload(tag: str) -> str:
    """Markup that would run, or leave an element with id `pwned-<tag>`, if it were parsed;
    escaped, it reads `id="pwned-<tag>"` on the page."""
    return (f'"><img src=x onerror="window.__pwned=1"><b id="pwned-{tag}">{tag}</b>'
            f'<a href="javascript:window.__pwned=1">go</a>'
            "</script><script>window.__pwned=1</script>")  # fmt: skip


def kernel_with(tag: str) -> str:
    return NAIVE.replace("#include", f"/* {payload(tag)} */\n#include", 1)


# What a page must not hold, and the payload tags it shows as text.
INSPECT_PAGE = """() => {
  const hrefOf = (a) => (a.getAttribute("href") || a.getAttribute("xlink:href") || "").trim();
  return {
    ran: typeof window.__pwned !== "undefined",
    elements: [...document.querySelectorAll('[id^="pwned-"]')].map((e) => e.outerHTML),
    images: [...document.querySelectorAll("img")].filter((i) => i.getAttribute("src") === "x")
      .map((i) => i.outerHTML),
    scriptLinks: [...document.querySelectorAll("a")]
      .filter((a) => hrefOf(a).toLowerCase().startsWith("javascript:")).map((a) => a.outerHTML),
    text: document.body.innerText,
  };
}"""


@dataclass
class Inspector:
    """Checks each page for payload markup and collects the payload tags shown as text."""

    shown: set[str] = field(default_factory=set)

    def __call__(self, page: Page) -> list[str]:
        found = page.evaluate(INSPECT_PAGE)
        self.shown.update(SHOWN.findall(found["text"]))
        problems = ["a payload script ran"] if found["ran"] else []
        problems += [f"payload element: {html}" for html in found["elements"]]
        problems += [f"payload image: {html}" for html in found["images"]]
        problems += [f"javascript: link: {html}" for html in found["scriptLinks"]]
        return problems

    def text_of(self, page: Page, selector: str) -> str:
        text = str(page.locator(selector).first.text_content() or "")
        self.shown.update(SHOWN.findall(text))
        return text


@dataclass
class PoisonedTeam:
    slug: str
    admin: Membership
    session_id: int
    operator_slug: str
    version_id: int
    cases: list[int]
    html_export_id: int
    markdown_export_id: int


def payload_operator(team: Team, admin: User) -> OperatorVersion:
    """A team's operator as an importer hands it over, every text of it a payload."""
    shared = small_vector_add()
    definition = definition_of(shared)
    spec = replace(definition.spec, slug="poisoned_add", name=payload("opname"),
                   description=payload("opdesc"))  # fmt: skip
    reference = {name: f"{text}\n# {payload('opref')}" if isinstance(text, str) else text
                 for name, text in definition.reference_source.items()}  # fmt: skip
    poisoned = replace(definition, spec=spec, reference_source=reference,
                       origin_path=f"/imports/{payload('originpath')}",
                       starting_kernels={"cpu-c": kernel_with("startkernel")})  # fmt: skip
    outcomes = [{"inputs": c.inputs, "outputs": c.outputs} for c in shared.cases.all()]
    version, _ = version_store(team=team, definition=poisoned, outcomes=outcomes,
                               created_by=admin)  # fmt: skip
    return version


def case_event(session_id: int, version: OperatorVersion, iteration: int, parent: int | None,
               *, code: str, strategy: str, outcome: str, **extra: Any) -> int:  # fmt: skip
    correct = outcome in ("improved", "no_change", "regressed")
    event = journal_append(session_id=session_id, kind="case_recorded", payload={
        "iteration": iteration, "version_id": version.pk, "target": "cpu-c",
        "strategy": strategy, "outcome": outcome, "correct": correct,
        "parent_case_id": parent, "source_sha256": kernel_source_store(code).sha256,
        "latency_ms": 2.0 - iteration * 0.5 if correct else None,
        "speedup_vs_reference": 0.5 + iteration if correct else None, **extra})  # fmt: skip
    return int(event.pk)


def step_events(session_id: int, version: OperatorVersion, case_id: int) -> None:
    """The loop's steps around a case, their free text a payload each."""
    journal_append(session_id=session_id, kind="candidate_proposed", payload={
        "operator": version.operator.slug, "iteration": 1, "strategy": payload("proposed"),
        "source_sha256": kernel_source_store(kernel_with("proposed")).sha256,
        "parent_case_id": case_id, "rationale": payload("rationale")})  # fmt: skip
    journal_append(session_id=session_id, kind="tool_called", payload={
        "operator": version.operator.slug, "iteration": 1, "tool": "compile",
        "summary": payload("toolsummary")})  # fmt: skip
    journal_append(session_id=session_id, kind="session_note", payload={"text": payload("note")})
    journal_append(session_id=session_id, kind="session_paused", payload={
        "status": "paused", "reason": payload("pausereason"), "actor": "admin"})  # fmt: skip


def knowledge_file() -> bytes:
    """Another team's knowledge-base export whose team and rule texts are payloads."""
    return json.dumps({
        "format": "kope-knowledge-base", "version": 1,
        "team": {"slug": payload("kbslug"), "name": payload("kbname")},
        "rules": [{"id": 1, "status": "approved", "approved_version": 1,
                   "source_key": payload("kbsource"),
                   "versions": [{"number": 1, "statement": payload("kbstatement"),
                                 "applies_when": payload("kbapplies"),
                                 "not_when": payload("kbnotwhen"),
                                 "evidence": {"distilled_by": payload("kbdistilled")}}],
                   "history": [{"from": "", "to": "approved", "version": 1,
                                "by": payload("kbby"), "comment": payload("kbcomment")}]}],
    }).encode()  # fmt: skip


def payload_rules(team: Team, admin: User, source_cases: list[int]) -> None:
    """A reviewed rule, approved with a comment; another approved and then vetoed (so hot
    memory records the reason); and another team's rules imported from a file."""
    for what, source_case in zip(("kept", "vetoed"), source_cases, strict=True):
        statement = payload("statement" if what == "kept" else "vetoedstatement")
        wording = Wording(statement, payload("applies"), payload("notwhen"))
        rule = rule_propose(team=team, source_key=f"case:{source_case}", wording=wording,
                            evidence={"operators": ["poisoned_add"]})  # fmt: skip
        embed_rule(rule.pk)
        rule_approve(rule=rule, user=admin, version_number=1, comment=payload(f"{what}comment"))
    rule_veto(rule=Rule.objects.get(pk=rule.pk), user=admin, reason=payload("veto"))
    knowledge_import(team=team, user=admin, filename=payload("kbfile"), raw=knowledge_file())
    with pytest.raises(ImportFileError):
        knowledge_import(team=team, user=admin, filename=payload("badkbfile"), raw=b"{")


@pytest.fixture
def poisoned(transactional_db: None) -> PoisonedTeam:
    """Made before Chromium starts: Playwright's event loop forbids the ORM in this thread."""
    owner = UserFactory()
    team = team_create(name='<b id="pwned-team">t</b><img src=x onerror="window.__pwned=1">',
                       owner=owner, slug="poisoned")  # fmt: skip
    admin = Membership.objects.select_related("user").get(team=team, user=owner)
    version = payload_operator(team, owner)
    session = session_create(team=team, user=owner, operators=[version.operator.slug],
                             memory_mode="off", label=payload("label"), start=False)  # fmt: skip
    first = case_event(session.pk, version, 0, None, code=kernel_with("startkernel"),
                       strategy=payload("startstrategy"), outcome="no_change",
                       feedback={"summary": "correct"})  # fmt: skip
    broken = case_event(session.pk, version, 1, first, code=kernel_with("brokenkernel"),
                        strategy=payload("brokenstrategy"), outcome="compile_error",
                        feedback={"summary": payload("compileerror")})  # fmt: skip
    faster = case_event(session.pk, version, 2, first, code=kernel_with("fasterkernel"),
                        strategy=payload("strategy"), outcome="improved",
                        retrieved=[f"case:{broken}"],
                        adopted=[{"key": f"case:{broken}", "why": payload("why")}])  # fmt: skip
    step_events(session.pk, version, faster)
    OptimizationSession.objects.filter(pk=session.pk).update(status="finished")
    payload_rules(team, owner, [faster, broken])
    ImportRun.objects.create(team=team, created_by=owner, path=f"/imports/{payload('importpath')}",
                             format="kernelbench", status="done", total=1, done=1,
                             report=[{"operator": payload("importfile"), "outcome": "failed",
                                      "reason": payload("importreason")}])  # fmt: skip
    html = export_request(team=team, user=owner, kind="session", fmt="html",
                          params={"session": session.pk})  # fmt: skip
    markdown = export_request(team=team, user=owner, kind="knowledge", fmt="md", params={})
    return PoisonedTeam(slug=team.slug, admin=admin, session_id=session.pk,
                        operator_slug=version.operator.slug, version_id=version.pk,
                        cases=[first, broken, faster], html_export_id=html.pk,
                        markdown_export_id=markdown.pk)  # fmt: skip


def in_another_thread(work: Callable[[], None]) -> None:
    """Run ORM work beside Playwright's event loop, which forbids it in this thread."""

    def run() -> None:
        try:
            work()
        finally:
            connections.close_all()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=30)


def check_page(inspector: Inspector, problems: PageProblems, page: Page, where: str) -> None:
    problems.url = where
    for problem in inspector(page):
        problems.add(problem)


def hover_over(page: Page, point: Locator) -> None:
    """Plotly listens on the layer above its points: the mouse goes there, not to the point."""
    box = point.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def watch_live_events(page: Page, url: str, team: PoisonedTeam, inspector: Inspector,
                      problems: PageProblems) -> None:  # fmt: skip
    """Events appended while the session page is open arrive over the websocket into the
    log, the chart and the htmx-refreshed context and operators fragments."""
    page.goto(f"{url}/t/{team.slug}/sessions/{team.session_id}/")
    expect(page.locator("#live-status")).to_have_text("live")

    def append() -> None:
        version = OperatorVersion.objects.select_related("operator").get(pk=team.version_id)
        case = case_event(team.session_id, version, 3, team.cases[2],
                          code=kernel_with("livekernel"), strategy=payload("livestrategy"),
                          outcome="improved")  # fmt: skip
        journal_append(session_id=team.session_id, kind="session_note",
                       payload={"text": payload("livenote")})  # fmt: skip
        journal_append(session_id=team.session_id, kind="context_assembled", payload={
            "operator": version.operator.slug, "iteration": 4, "tokens": 10, "budget": 100,
            "tokens_per_tier": {"cold": 10}, "admitted": [], "shortened": [], "cut": [],
            "hot_rules": [], "retrieved": [{"key": f"case:{case}", "kind": "case",
                                            "operator": payload("livecontext"),
                                            "similarity": 0.5, "value": 0.1}]})  # fmt: skip
        journal_append(session_id=team.session_id, kind="incumbent_replaced", payload={
            "operator": version.operator.slug, "iteration": 3, "case_id": case,
            "previous_case_id": team.cases[2], "latency_ms": 0.5,
            "previous_latency_ms": 1.0})  # fmt: skip

    in_another_thread(append)
    expect(page.locator('#event-log li[data-kind="session_note"]').last).to_contain_text("livenote")
    # the context and operators fragments, fetched again by htmx
    expect(page.locator("#context")).to_contain_text("livecontext")
    expect(page.locator("#operators")).to_contain_text("livestrategy")
    check_page(inspector, problems, page, "session page after live events")
    inspector.text_of(page, "#event-log")
    problems.url = "session chart hover"
    hover_over(page, page.locator("#latency-chart .scatterlayer .trace").first.locator(
        "path.point").last)  # fmt: skip
    expect(page.locator("#latency-chart .hoverlayer")).to_contain_text("livestrategy")
    assert 'id="pwned-livestrategy"' in inspector.text_of(page, "#latency-chart .hoverlayer")
    check_page(inspector, problems, page, "session chart hover")


def draw_forest_and_diff(page: Page, url: str, team: PoisonedTeam, inspector: Inspector,
                         problems: PageProblems) -> None:  # fmt: skip
    page.goto(f"{url}/t/{team.slug}/forest/?operator={team.operator_slug}")
    page.locator("a.expand").first.click()
    expect(page.locator("ul.forest ul[role=group]").first).to_be_attached()
    check_page(inspector, problems, page, "forest branch drawn on demand")
    first, _, faster = team.cases
    page.goto(f"{url}/t/{team.slug}/compare/?a={first}&b={faster}&view=unified")
    expect(page.locator('#code-diff[data-renderer="diff2html"]')).to_be_attached()
    assert "fasterkernel" in inspector.text_of(page, "#code-diff")
    check_page(inspector, problems, page, "compare diff2html")


def open_exports(page: Page, url: str, team: PoisonedTeam, inspector: Inspector,
                 problems: PageProblems, folder: Path) -> None:  # fmt: skip
    """The HTML report opened as a file, as a reader would; the Markdown one is text."""
    base = f"{url}/t/{team.slug}/reports"
    report = page.request.get(f"{base}/{team.html_export_id}/download/")
    assert report.headers["content-disposition"].startswith("attachment;")
    html_file = folder / "report.html"
    html_file.write_bytes(report.body())
    page.goto(html_file.as_uri())
    check_page(inspector, problems, page, "HTML report")
    assert 'id="pwned-strategy"' in page.inner_text("body")
    markdown = page.request.get(f"{base}/{team.markdown_export_id}/download/")
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert markdown.headers["content-disposition"].startswith("attachment;")
    assert markdown.headers["x-content-type-options"] == "nosniff"
    # Read in a Markdown viewer, the statement is its own text, not markup.
    viewed = rendered(markdown.text())
    assert payload("kbstatement") in shown_text(viewed)
    assert not re.search(r"<(script|img|a|b)\b", viewed), viewed


def test_no_untrusted_text_becomes_markup_or_script(
    poisoned: PoisonedTeam, chromium: Browser, tmp_path: Path
) -> None:
    start = f"/t/{poisoned.slug}/sessions/"
    inspector = Inspector()
    with daphne(process_env("single-machine")) as url:
        problems = PageProblems()
        page = watched_page(chromium, problems, "light")
        log_in(page, problems, url, poisoned.admin, start)
        visited = crawl(page, problems, url, f"{url}{start}", inspector)
        draw_forest_and_diff(page, url, poisoned, inspector, problems)
        watch_live_events(page, url, poisoned, inspector, problems)
        open_exports(page, url, poisoned, inspector, problems, tmp_path)
    print(f"{len(visited)} pages:", *visited, sep="\n")
    assert problems.found == [], "\n".join(problems.found)
    assert (SEEDED | LIVE) - inspector.shown == set(), "payloads never shown as text"
