"""Reviewing rules in Chromium: approve by keyboard, veto with a reason, and a viewer sees no
approve button."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.memory.models import Rule
from apps.memory.rules import Wording, rule_propose
from tests.factories import MembershipFactory, TeamFactory
from tests.processes import daphne
from tests.workbench.test_live_events import process_env

from .conftest import CHROMIUM, log_in

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing"),
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "var" / "test" / "review-page.png"


@pytest.fixture
def people(transactional_db: None) -> tuple[Membership, Membership, list[Rule]]:
    # Made before Chromium starts: Playwright's event loop forbids the ORM in this thread.
    team = TeamFactory(slug="rules", name="Rules")
    evidence = {"operators": ["gemm", "batched_matmul", "matmul_bias_relu"], "adoptions": 3,
                "value": 0.3, "measured": {"speedup_vs_parent": 5.8}}  # fmt: skip
    rules = [
        rule_propose(
            team=team,
            source_key=f"case:{n}",
            evidence=evidence,
            wording=Wording(statement, "three-deep matmul nests"),
        )
        for n, statement in (
            (1, "Accumulate into the output row in i-p-j order"),
            (2, "Unroll every loop by 8"),
        )
    ]
    reviewer = MembershipFactory(team=team, role=Role.REVIEWER)
    viewer = MembershipFactory(team=team, role=Role.VIEWER)
    return reviewer, viewer, rules


def test_a_reviewer_approves_and_vetoes_and_a_viewer_cannot_approve(
    people: tuple[Membership, Membership, list[Rule]], chromium: Browser
) -> None:
    reviewer, viewer, (first, second) = people
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        log_in(page, url, reviewer, "/t/rules/review/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Review")
        cards = page.locator("#rule-queue .rule-card")
        expect(cards).to_have_count(2)
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        rows = {cards.nth(i).get_attribute("data-rule"): i for i in range(2)}
        page.keyboard.press("j" if rows[str(first.pk)] == 1 else "k")
        page.keyboard.press("a")  # approves the selected rule: the first one
        expect(page.get_by_role("status")).to_contain_text(f"Rule {first.pk} approved.")

        card = page.locator(f'.rule-card[data-rule="{second.pk}"]')
        card.get_by_label("Veto reason").fill("unrolling by 8 everywhere bloats small loops")
        card.get_by_role("button", name="Veto").click()
        expect(page.get_by_role("status")).to_contain_text(f"Rule {second.pk} vetoed.")

        page.goto(f"{url}/t/rules/review/?status=approved")
        expect(page.locator(f'.rule-card[data-rule="{first.pk}"]')).to_be_visible()
        page.goto(f"{url}/t/rules/review/{second.pk}/")
        expect(page.locator("table").first).to_contain_text("bloats small loops")

        visitor = chromium.new_context().new_page()
        log_in(visitor, url, viewer, "/t/rules/review/?status=all")
        expect(visitor.locator("#rule-queue .rule-card")).to_have_count(2)
        expect(visitor.get_by_role("button", name="Approve")).to_have_count(0)
        visitor.goto(f"{url}/t/rules/review/{first.pk}/")
        expect(visitor.get_by_role("button", name="Approve")).to_have_count(0)


def test_a_key_acts_on_the_card_that_has_focus(
    people: tuple[Membership, Membership, list[Rule]], chromium: Browser
) -> None:
    reviewer, _, _ = people
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        log_in(page, url, reviewer, "/t/rules/review/")
        cards = page.locator("#rule-queue .rule-card")
        expect(cards.first).to_be_focused()  # the first card is selected on arrival
        second = cards.nth(1)
        second.locator(".statement").click()  # a click (or Tab) moves focus to another card
        expect(second).to_be_focused()
        expect(second).to_have_class(re.compile(r"\bselected\b"))

        chosen = second.get_attribute("data-rule")
        page.keyboard.press("a")
        expect(page.get_by_role("status")).to_contain_text(f"Rule {chosen} approved.")
        page.goto(f"{url}/t/rules/review/?status=approved")
        approved = page.locator("#rule-queue .rule-card")
        expect(approved).to_have_count(1)
        expect(approved).to_have_attribute("data-rule", str(chosen))


@pytest.fixture
def four_pending(transactional_db: None) -> tuple[Membership, list[Rule]]:
    team = TeamFactory(slug="walk", name="Walk")
    rules = [
        rule_propose(team=team, source_key=f"case:{n}", evidence={"operators": ["gemm"]},
                     wording=Wording(statement, "three-deep matmul nests"))
        for n, statement in enumerate(("Tile the k loop by 32", "Unroll the inner loop by 4",
                                       "Make every accumulator float", "Keep buffers"))
    ]  # fmt: skip
    return MembershipFactory(team=team, role=Role.REVIEWER), rules


def test_a_reviewer_walks_every_decision_on_the_rule_pages_and_sees_the_reasons(
    four_pending: tuple[Membership, list[Rule]], chromium: Browser
) -> None:
    reviewer, (tiled, unrolled, floats, _) = four_pending
    with daphne(process_env("single-machine")) as url:
        page = chromium.new_page()
        log_in(page, url, reviewer, f"/t/walk/review/{tiled.pk}/")
        page.get_by_role("button", name="Approve v1").click()
        expect(page.get_by_role("status")).to_contain_text(f"Rule {tiled.pk} approved.")

        page.goto(f"{url}/t/walk/review/{unrolled.pk}/")
        page.get_by_text("Edit, then approve or keep for review").click()
        page.get_by_label("Statement").fill("Unroll the innermost loop by 4 on AVX2 hosts")
        page.get_by_label("Comment").fill("narrower")
        page.get_by_role("button", name="Save as a new version for review").click()
        expect(page.get_by_role("status")).to_contain_text(f"Rule {unrolled.pk}: version 2 saved")
        page.goto(f"{url}/t/walk/review/{unrolled.pk}/")
        expect(page.locator(".statement")).to_have_text(
            "Unroll the innermost loop by 4 on AVX2 hosts"
        )
        expect(page.locator("h1 .status")).to_have_text("pending")

        page.goto(f"{url}/t/walk/review/{floats.pk}/")
        page.get_by_label("Veto reason").fill("float sums drift past tolerance on long rows")
        page.get_by_role("button", name="Veto", exact=True).click()
        expect(page.locator(".decided")).to_contain_text("float sums drift past tolerance")

        page.goto(f"{url}/t/walk/review/{tiled.pk}/")
        page.get_by_label("Retirement reason").fill("superseded by the packed GEMM rule")
        page.get_by_role("button", name="Retire").click()
        expect(page.locator("h1 .status")).to_have_text("retired")
        expect(page.locator(".decided")).to_contain_text("superseded by the packed GEMM rule")
        history = page.locator("table").last
        expect(history).to_contain_text("superseded by the packed GEMM rule")

        page.goto(f"{url}/t/walk/review/{floats.pk}/")
        expect(page.locator("h1 .status")).to_have_text("vetoed")
        expect(page.locator("table").last).to_contain_text("float sums drift past tolerance")
