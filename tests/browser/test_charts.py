"""Charts and side-by-side tables that stay readable, in Chromium, light and dark, 1400 px and
390 px: the session's log latency axis labels its ticks without printing them on top of each
other; the compare page's two "costliest lines" tables keep to their own columns; a profile
has a page of its own with its timed calls as a timeline and its costs per function."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.devices.models import Profile
from apps.devices.services import evaluation_execute
from apps.memory.compare_views import profile_start
from apps.memory.models import Case
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import MembershipFactory, TeamFactory
from tests.memory.test_compare_pages import NAIVE, evaluated, recorded_case, small_vector_add
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in, script_errors
from .test_every_page import sideways_scroll

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
# The kernel's costliest line made long, as real kernels' are (an index expression, a comment).
LONG_LINE = NAIVE.replace(
    "out[i] = a[i] + b[i];",
    "out[i] = a[i] + b[i]; /* the sum of the two inputs, element by element, no reuse */",
)
SCREENS = [("light", 1400), ("dark", 1400), ("dark", 390)]


@dataclass
class Charted:
    engineer: Membership
    session_id: int
    pair: tuple[int, int]
    profile_id: int


def profiled(case_id: int, engineer: Membership) -> int:
    """A real cachegrind profile of the case's kernel, made in this process's sandbox."""
    case = Case.objects.get(pk=case_id)
    evaluation = profile_start(engineer.team, case, engineer.user)
    evaluation_execute(evaluation.pk, max_attempts=1)
    return int(Profile.objects.get(evaluation=evaluation).pk)


@pytest.fixture
def charted(transactional_db: None) -> Charted:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="charts", name="Charts")
    engineer = MembershipFactory(team=team, role=Role.ENGINEER)
    version = small_vector_add()
    # Unevaluated cases have latency 1 + iteration ms: 2 to 60 ms, where Chromium's log axis
    # labelled 2 3 4 … 9 10 2 3 … on top of each other.
    spread = session_create(team=team, user=engineer.user, operators=[version.operator.slug],
                            memory_mode="off", start=False)  # fmt: skip
    parent = None
    for iteration in (1, 6, 19, 59):
        parent = recorded_case(spread, version, iteration, parent, NAIVE, f"try {iteration}")
    measured = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    a = recorded_case(measured, version, 0, None, NAIVE, "starting kernel",
                      evaluated(team, version, NAIVE))  # fmt: skip
    b = recorded_case(measured, version, 1, a, LONG_LINE, "a comment",
                      evaluated(team, version, LONG_LINE))  # fmt: skip
    profiled(a, engineer)
    return Charted(engineer, spread.pk, (a, b), profiled(b, engineer))


def overlapping(page: Page, selector: str) -> list[tuple[str, str]]:
    """Pairs of the selected SVG labels whose boxes intersect."""
    boxes: list[dict[str, Any]] = page.eval_on_selector_all(
        selector,
        """labels => labels.map(label => {
             const r = label.getBoundingClientRect();
             return {text: label.textContent, left: r.left, right: r.right, top: r.top,
                     bottom: r.bottom};
           })""",
    )
    return [
        (one["text"], other["text"])
        for i, one in enumerate(boxes)
        for other in boxes[i + 1 :]
        if one["left"] < other["right"] and other["left"] < one["right"]
        and one["top"] < other["bottom"] and other["top"] < one["bottom"]
    ]  # fmt: skip


def boxes_apart(page: Page, selector: str) -> bool:
    first, second = (page.locator(selector).nth(i).bounding_box() for i in (0, 1))
    assert first is not None and second is not None
    return first["x"] + first["width"] <= second["x"]


def test_charts_and_side_by_side_tables_stay_readable(charted: Charted, chromium: Browser) -> None:
    a, b = charted.pair
    team = charted.engineer.team.slug
    with daphne(process_env("single-machine")) as url:
        for scheme, width in SCREENS:
            page = chromium.new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
            errors = script_errors(page)
            log_in(page, url, charted.engineer, f"/t/{team}/sessions/{charted.session_id}/")
            chart = page.locator("#latency-chart")
            expect(chart).to_have_attribute("data-renderer", "plotly")
            labels = page.locator("#latency-chart .ytick text")
            expect(labels.first).to_be_visible()
            texts = labels.all_text_contents()
            assert texts[0] == "2" and texts[-1] == "50" and len(texts) <= 6, texts
            assert overlapping(page, "#latency-chart .ytick text") == [], (scheme, width)

            page.goto(f"{url}/t/{team}/compare/?a={a}&b={b}")
            expect(page.locator("table.line-costs")).to_have_count(2)
            expect(page.locator("table.line-costs").nth(1)).to_contain_text("element by element")
            if width > 800:  # two columns; on a phone they stack
                assert boxes_apart(page, "table.line-costs"), "the two tables overlap"
            expect(page.locator("table.line-costs").first).to_contain_text(",")  # 1,234 counts
            page.get_by_role("link", name=f"Timeline and costs of profile #{charted.profile_id}"
                             ).click()  # fmt: skip

            expect(page.get_by_role("heading", level=1)).to_contain_text(
                f"Profile #{charted.profile_id}"
            )
            calls = page.locator("#profile-calls")
            expect(calls).to_have_attribute("data-renderer", "plotly")
            expect(calls.locator(".bars .point")).to_have_count(7)  # one bar per timed call
            expect(page.locator("#profile-calls-summary")).to_contain_text("7 timed calls over")
            functions = page.locator("#profile-functions")
            expect(functions).to_have_attribute("data-renderer", "plotly")
            expect(functions.locator(".ytick")).to_contain_text(["other (outside the kernel)"])
            ink = functions.evaluate("holder => getComputedStyle(holder).color")
            expect(functions.locator(".xtick text").first).to_have_css("fill", ink)
            expect(page.locator("table.function-costs")).to_contain_text("kope_kernel")
            expect(page.locator("table.line-costs")).to_contain_text("element by element")
            assert overlapping(page, "#profile-functions .ytick text") == []
            if width < 800:
                assert sideways_scroll(page) == []
            assert errors == [], (scheme, width, errors)
            page.close()
