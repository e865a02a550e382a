"""Bad input to rule edits, through the service, the review page and the API: any wording
is either a new version or refused with a readable reason, and a refused edit leaves no row
behind (no version, no transition, no change of status)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client
from django.utils.html import escape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.agents.claude.distiller import wording_from
from apps.core.errors import DomainError
from apps.memory.models import Rule, RuleTransition, RuleVersion
from apps.memory.rules import (
    MAX_COMMENT_CHARS,
    MAX_STATEMENT_CHARS,
    Wording,
    rule_edit,
    rule_propose,
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TEXT = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.sampled_from("ab \x00\n\t\ufeffé"), max_size=30),
    st.integers(0, 6000).map(lambda n: "x" * n),
)


@pytest.fixture
def rule(team: Team) -> Rule:
    return rule_propose(team=team, source_key="case:1", evidence={"cases": ["case:1"]},
                        wording=Wording("Tile the k loop", "matmul-like loops"))  # fmt: skip


@pytest.fixture
def reviewer(member: Callable[[Role | str], User]) -> User:
    return member(Role.REVIEWER)


def rows(rule: Rule) -> tuple[int, int, str]:
    rule.refresh_from_db()
    return RuleVersion.objects.count(), RuleTransition.objects.count(), rule.status


@pytest.mark.parametrize(
    ("wording", "comment", "reason"),
    [
        (Wording("Tile\x00", "loops"), "", "a rule's wording cannot hold a NUL character"),
        (Wording("Tile", "loops", "\x00"), "", "a rule's wording cannot hold a NUL character"),
        (Wording("x" * (MAX_STATEMENT_CHARS + 1), "loops"), "",
         f"the statement text is {MAX_STATEMENT_CHARS + 1} characters; the limit is 4000"),
        (Wording("Tile", "y" * 1_000_000), "",
         "the applies when text is 1000000 characters; the limit is 2000"),
        (Wording("Tile", "loops"), "\x00", "a comment is at most 2000 characters"),
        (Wording("Tile", "loops"), "c" * (MAX_COMMENT_CHARS + 1),
         "a comment is at most 2000 characters"),
    ],
)  # fmt: skip
def test_a_refused_edit_says_why_and_leaves_no_row(
    rule: Rule, reviewer: User, wording: Wording, comment: str, reason: str
) -> None:
    before = rows(rule)
    with pytest.raises(DomainError, match=reason):
        rule_edit(rule=rule, user=reviewer, wording=wording, comment=comment)
    assert rows(rule) == before


@FUZZ
@given(statement=TEXT, applies_when=TEXT, not_when=TEXT, comment=TEXT)
def test_any_edit_is_a_new_version_or_a_domain_error_with_nothing_stored(
    rule: Rule, reviewer: User, statement: str, applies_when: str, not_when: str, comment: str
) -> None:
    versions, transitions, _ = rows(rule)
    try:
        version = rule_edit(rule=rule, user=reviewer, comment=comment,
                            wording=Wording(statement, applies_when, not_when))  # fmt: skip
    except DomainError as error:
        assert error.message
        assert rows(rule)[:2] == (versions, transitions)
        return
    assert rows(rule) == (versions + 1, transitions + 1, "pending")
    assert version.statement == statement.strip() and "\x00" not in version.statement


@FUZZ
@given(statement=TEXT, applies_when=TEXT, comment=TEXT)
def test_the_review_page_answers_any_edit_with_a_message_and_keeps_a_refused_one(
    rule: Rule, client_for: Callable[[Role | str], Client], statement: str, applies_when: str,
    comment: str,
) -> None:  # fmt: skip
    client = client_for(Role.REVIEWER)
    versions, transitions, _ = rows(rule)
    response = client.post(
        f"/t/{rule.team.slug}/review/{rule.pk}/edit/",
        {"statement": statement, "applies_when": applies_when, "comment": comment},
    )
    [message] = list(get_messages(response.wsgi_request))
    if message.level_tag == "error":
        assert response.status_code == 400
        assert rows(rule)[:2] == (versions, transitions)
        # the page again, the reviewer's wording in the form (escaped), nothing lost
        assert escape(statement) in response.content.decode()
    else:
        assert response.status_code == 302
        assert rows(rule)[:2] == (versions + 1, transitions + 1)


def test_the_api_refuses_a_nul_or_an_over_long_edit_with_a_4xx(
    rule: Rule, client_for: Callable[[Role | str], Client]
) -> None:
    client = client_for(Role.REVIEWER)
    url = f"/api/teams/{rule.team.slug}/rules/{rule.pk}"
    before = rows(rule)
    nul = client.put(url, {"statement": "Tile\x00", "applies_when": "loops"},
                      content_type="application/json")  # fmt: skip
    long = client.put(url, {"statement": "x" * 4001, "applies_when": "loops"},
                       content_type="application/json")  # fmt: skip
    assert (nul.status_code, long.status_code) == (400, 422)
    # the API's parser refuses it first, naming the field (the service refuses it too)
    assert nul.json()["error"]["message"] == (
        "body.statement holds a NUL character, which cannot be stored"
    )
    assert rows(rule) == before


@pytest.mark.parametrize("statement", ["Tile\x00 the loop", "Tile " * 200_000, " "])
def test_a_model_wording_no_reviewer_could_write_falls_back_to_the_summarizer(
    statement: str,
) -> None:
    block = {"type": "tool_use", "name": "propose_rule",
             "input": {"statement": statement, "applies_when": "loops"}}  # fmt: skip
    assert wording_from([block]) is None
    block["input"] = {"statement": "Tile the loop", "applies_when": "loops"}
    assert wording_from([block]) == Wording("Tile the loop", "loops")
