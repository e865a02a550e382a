"""The knowledge base leaves one team as a file and arrives in another's review queue as
pending candidates with their provenance; a bad file imports nothing."""

from __future__ import annotations

import json

import pytest

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.core.errors import PermissionDenied
from apps.memory.models import Rule, RuleTransition
from apps.memory.rules import Wording, hot_memory, rule_approve, rule_edit, rule_propose, rule_veto
from apps.reports.knowledge import ImportFileError
from apps.reports.models import Export
from apps.reports.services import export_request, knowledge_import
from tests.factories import MembershipFactory

EVIDENCE = {"source": "case:1", "operators": ["gemm", "bmm", "conv"], "adoptions": 3,
            "value": 0.4, "measured": {"speedup_vs_parent": 1.8},
            "distilled_by": "offline"}  # fmt: skip


def knowledge_of(team: Team) -> dict[str, Rule]:
    reviewer = MembershipFactory(team=team, role=Role.REVIEWER).user
    propose = lambda key, text: rule_propose(  # noqa: E731
        team=team, source_key=key, evidence=EVIDENCE, wording=Wording(text, "matmul-like loops")
    )
    pending = propose("case:1", "Tile the k loop by 32")
    approved = propose("case:2", "Hoist the bias load")
    rule_edit(rule=approved, user=reviewer, wording=Wording("Hoist the bias load out", "conv"))
    rule_approve(rule=approved, user=reviewer, version_number=2)  # approval is of the newest
    vetoed = rule_veto(rule=propose("case:3", "Unroll everything"), user=reviewer,
                       reason="only true on one host")  # fmt: skip
    return {"pending": pending, "approved": approved, "vetoed": vetoed}


def exported(team: Team, fmt: str) -> bytes:
    viewer = MembershipFactory(team=team, role=Role.VIEWER).user
    export = export_request(team=team, user=viewer, kind="knowledge", fmt=fmt, params={})
    assert export.status == "done", export.error
    return bytes(export.content)


def test_the_export_has_every_rule_with_its_evidence_and_history(team: Team) -> None:
    rules = knowledge_of(team)

    data = json.loads(exported(team, "json"))
    markdown = exported(team, "md").decode()

    assert data["format"] == "kope-knowledge-base" and data["team"]["slug"] == team.slug
    by_id = {r["id"]: r for r in data["rules"]}
    assert {by_id[r.pk]["status"] for r in rules.values()} == {"pending", "approved", "vetoed"}
    approved = by_id[rules["approved"].pk]
    assert approved["approved_version"] == 2 and len(approved["versions"]) == 2
    assert approved["versions"][0]["evidence"] == EVIDENCE
    veto = by_id[rules["vetoed"].pk]["history"][-1]
    assert veto["to"] == "vetoed" and veto["comment"] == "only true on one host"
    assert markdown.startswith(f"# Knowledge base of {team.name}")
    for heading in ("## Approved (1)", "## Pending (1)", "## Vetoed (1)"):
        assert heading in markdown
    assert f"### Rule {rules['approved'].pk} v2: Hoist the bias load out" in markdown
    assert "only true on one host" in markdown


def test_the_export_reimports_into_another_team_as_pending_candidates(
    team: Team, other_team: Team
) -> None:
    rules = knowledge_of(team)
    reviewer = MembershipFactory(team=other_team, role=Role.REVIEWER).user
    raw = exported(team, "json")

    record = knowledge_import(team=other_team, user=reviewer, filename="kb.json", raw=raw)

    imported = {r.source_key: r for r in Rule.objects.filter(team=other_team)}
    assert set(imported) == {f"import:{team.slug}:{rules['pending'].pk}",
                             f"import:{team.slug}:{rules['approved'].pk}"}  # fmt: skip
    for rule in imported.values():
        assert rule.status == Rule.Status.PENDING and rule.approved_version is None
        version = rule.versions.get()
        assert version.evidence["provenance"] == f"imported from team {team.name}"
        assert version.evidence["operators"] == EVIDENCE["operators"]
        assert version.evidence["imported_from"]["team"] == team.slug
    was_approved = imported[f"import:{team.slug}:{rules['approved'].pk}"].versions.get()
    assert was_approved.statement == "Hoist the bias load out"  # the wording approved there
    assert was_approved.evidence["imported_from"]["status"] == "approved"
    assert hot_memory(other_team) == []  # nothing is trusted until a reviewer here approves
    assert record.status == "done" and record.created_by == reviewer
    assert record.progress_text.startswith("2 rules from Kernels put up for review")

    again = knowledge_import(team=other_team, user=reviewer, filename="kb.json", raw=raw)
    assert Rule.objects.filter(team=other_team).count() == 2
    assert json.loads(bytes(again.content))["already_imported"] == 2


def test_a_bad_rule_late_in_the_file_imports_nothing_and_says_where(
    team: Team, other_team: Team
) -> None:
    knowledge_of(team)
    data = json.loads(exported(team, "json"))
    data["rules"][-1]["versions"][0]["statement"] = ""
    reviewer = MembershipFactory(team=other_team, role=Role.REVIEWER).user
    transitions = RuleTransition.objects.count()

    with pytest.raises(ImportFileError) as error:
        knowledge_import(team=other_team, user=reviewer, filename="kb.json",
                         raw=json.dumps(data).encode())  # fmt: skip

    last = len(data["rules"]) - 1
    assert str(error.value) == f"kb.json: rules[{last}].versions[0].statement: must not be empty"
    assert not Rule.objects.filter(team=other_team).exists()
    assert RuleTransition.objects.count() == transitions
    failed = Export.objects.get(team=other_team)
    assert failed.status == "failed" and failed.kind == "knowledge_import"
    assert "rules[" in failed.error and not failed.content


def test_a_team_cannot_import_its_own_knowledge_base(team: Team) -> None:
    knowledge_of(team)
    reviewer = MembershipFactory(team=team, role=Role.REVIEWER).user
    with pytest.raises(ImportFileError, match="own knowledge base"):
        knowledge_import(team=team, user=reviewer, filename="kb.json", raw=exported(team, "json"))


@pytest.mark.parametrize("role", [Role.VIEWER, Role.ENGINEER])
def test_only_reviewers_and_admins_import(team: Team, other_team: Team, role: Role) -> None:
    knowledge_of(team)
    user = MembershipFactory(team=other_team, role=role).user
    with pytest.raises(PermissionDenied):
        knowledge_import(team=other_team, user=user, filename="kb.json",
                         raw=exported(team, "json"))  # fmt: skip
    assert not Rule.objects.filter(team=other_team).exists()


def test_an_import_that_fails_unexpectedly_is_recorded_failed_not_left_running(
    team: Team, other_team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug or a database error mid-import (injected here) rolls the rules back and ends its
    record failed with the reason, never a record left "running" forever."""
    knowledge_of(team)
    raw = exported(team, "json")
    reviewer = MembershipFactory(team=other_team, role=Role.REVIEWER).user

    def broken(**_: object) -> Rule:
        raise RuntimeError("the rule store broke")

    monkeypatch.setattr("apps.reports.services.rule_propose", broken)
    with pytest.raises(RuntimeError):
        knowledge_import(team=other_team, user=reviewer, filename="kb.json", raw=raw)

    record = Export.objects.get(team=other_team, kind="knowledge_import")
    assert record.status == "failed" and record.finished_at is not None
    assert record.error == "kb.json: RuntimeError: the rule store broke"
    assert not Rule.objects.filter(team=other_team).exists()


def test_a_file_from_a_team_with_a_long_name_imports_and_its_summary_is_cut(
    team: Team, other_team: Team
) -> None:
    """The summary names the source team; a name of any length must not break the import."""
    knowledge_of(team)
    data = json.loads(exported(team, "json"))
    data["team"]["name"] = "A team with a very long name " * 10
    reviewer = MembershipFactory(team=other_team, role=Role.REVIEWER).user

    export = knowledge_import(team=other_team, user=reviewer, filename="kb.json",
                              raw=json.dumps(data).encode())  # fmt: skip

    assert export.status == "done"
    assert export.progress_text.startswith("2 rules from A team with a very long name")
    assert len(export.progress_text) == 200
    assert Rule.objects.filter(team=other_team).count() == 2


def test_a_file_from_a_team_with_a_long_slug_imports_every_rule_once(
    team: Team, other_team: Team
) -> None:
    """A key cut to the column's 100 characters made every rule of such a file one key: all
    but the first were counted as already imported and left out."""
    knowledge_of(team)
    data = json.loads(exported(team, "json"))
    data["team"]["slug"] = "a-workbench-elsewhere-" * 5
    raw = json.dumps(data).encode()
    reviewer = MembershipFactory(team=other_team, role=Role.REVIEWER).user

    export = knowledge_import(team=other_team, user=reviewer, filename="kb.json", raw=raw)
    again = knowledge_import(team=other_team, user=reviewer, filename="kb.json", raw=raw)

    assert export.progress_text.startswith("2 rules from Kernels put up for review")
    assert Rule.objects.filter(team=other_team).count() == 2
    assert json.loads(bytes(again.content))["already_imported"] == 2


def test_an_import_whose_request_dies_mid_way_leaves_no_record_running(
    team: Team, other_team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A web worker killed mid-import (a timeout raises SystemExit in it, injected here) must
    not leave a record "running" that nothing will ever end and the page polls for ever."""
    knowledge_of(team)
    raw = exported(team, "json")
    reviewer = MembershipFactory(team=other_team, role=Role.REVIEWER).user

    def killed(**_: object) -> Rule:
        raise SystemExit(1)

    monkeypatch.setattr("apps.reports.services.rule_propose", killed)
    with pytest.raises(SystemExit):
        knowledge_import(team=other_team, user=reviewer, filename="kb.json", raw=raw)

    assert not Export.objects.filter(team=other_team, status="running").exists()
    assert not Rule.objects.filter(team=other_team).exists()
