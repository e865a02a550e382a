"""The rule page: its evidence linked, and every decision a reviewer can take there, each with
its reason kept in the rule's history and shown."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.models import Rule
from apps.memory.rules import Wording, rule_approve, rule_propose
from apps.memory.values import MemoryMode, consolidate
from tests.support.experiences import PARALLEL, Memory, adopted_on_three


def pending(team: Team, key: str) -> Rule:
    return rule_propose(team=team, source_key=key, evidence={},
                        wording=Wording("Tile the k loop", "matmul nests"))  # fmt: skip


def approved(team: Team, key: str, reviewer: User) -> Rule:
    return rule_approve(rule=pending(team, key), user=reviewer, version_number=1)


def test_the_rule_page_links_every_source_adoption_and_failure(
    memory: Memory, client_for: Callable[[Role | str], Client]
) -> None:
    source = memory.experience()
    adopted_on_three(memory, source)
    broke = memory.case("gelu", PARALLEL, "incorrect", None)
    (rule,) = consolidate(memory.team, mode=MemoryMode.READ_WRITE)

    html = client_for(Role.VIEWER).get(f"/t/kernels/review/{rule.pk}/").content.decode()

    evidence = rule.versions.get().evidence
    for case_id in [int(source.key.split(":")[1]), *evidence["adoption_cases"], broke.pk]:
        assert f'href="/t/kernels/cases/{case_id}/"' in html
    assert "Parallelize the outermost loop with OpenMP (static schedule)" in html
    assert "broke correctness on gelu" in html


def test_an_approved_rule_is_retired_or_vetoed_from_its_page_with_a_reason_shown(
    team: Team, member: Callable[[Role | str], User], client_for: Callable[[Role | str], Client]
) -> None:
    reviewer = client_for(Role.REVIEWER)
    first, second = (approved(team, f"case:{n}", member(Role.REVIEWER)) for n in (1, 2))
    page = reviewer.get(f"/t/kernels/review/{first.pk}/").content.decode()
    assert "Retirement reason" in page and "Veto reason" in page

    unexplained = reviewer.post(f"/t/kernels/review/{first.pk}/retire/", {"reason": "  "})
    assert [str(m) for m in get_messages(unexplained.wsgi_request)] == [
        "a retirement needs a reason"
    ]
    assert Rule.objects.get(pk=first.pk).status == "approved"

    back = f"/t/kernels/review/{first.pk}/"
    retired = reviewer.post(f"{back}retire/", {"reason": "superseded by rule 9", "next": back})
    assert retired.status_code == 302 and retired["Location"] == back
    reviewer.post(f"/t/kernels/review/{second.pk}/veto/", {"reason": "races on the output"})

    for rule, status, reason in ((first, "retired", "superseded by rule 9"),
                                 (second, "vetoed", "races on the output")):  # fmt: skip
        assert Rule.objects.get(pk=rule.pk).status == status
        assert rule.transitions.last().comment == reason
        html = reviewer.get(f"/t/kernels/review/{rule.pk}/").content.decode()
        assert f'<p class="decided">{status.capitalize()} by ' in html and reason in html


def test_a_pending_rule_is_edited_for_review_without_approving_it(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    rule, reviewer = pending(team, "case:1"), client_for(Role.REVIEWER)
    assert "Save as a new version for review" in reviewer.get(
        f"/t/kernels/review/{rule.pk}/").content.decode()  # fmt: skip

    reviewer.post(f"/t/kernels/review/{rule.pk}/edit/", {
        "statement": "Tile the k loop by 32", "applies_when": "matmul nests over 256",
        "not_when": "", "comment": "narrower", "then": "review"})  # fmt: skip

    rule.refresh_from_db()
    assert rule.status == "pending" and rule.approved_version is None
    assert rule.versions.order_by("number").last().statement == "Tile the k loop by 32"
