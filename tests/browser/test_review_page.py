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
