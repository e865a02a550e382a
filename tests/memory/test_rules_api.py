"""The review queue over the API: the same decisions, the same role checks, a readable error."""

from __future__ import annotations

from collections.abc import Callable

from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.rules import Wording, rule_propose


def test_a_reviewer_approves_a_pending_rule_over_the_api(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    rule = rule_propose(team=team, source_key="case:9", evidence={"operators": ["gemm"]},
                        wording=Wording("Tile the k loop", "matmul-like loops"))  # fmt: skip
    reviewer, engineer = client_for(Role.REVIEWER), client_for(Role.ENGINEER)

    pending = reviewer.get("/api/teams/kernels/rules?status=pending").json()
    assert pending["count"] == 1 and pending["items"][0]["id"] == rule.pk

    refused = engineer.post(f"/api/teams/kernels/rules/{rule.pk}/approve", {"version": 1},
                            content_type="application/json")  # fmt: skip
    assert refused.status_code == 403 and "review permission" in refused.json()["error"]["message"]

    empty_veto = reviewer.post(f"/api/teams/kernels/rules/{rule.pk}/veto", {"reason": ""},
                               content_type="application/json")  # fmt: skip
    assert empty_veto.status_code == 422

    approved = reviewer.post(f"/api/teams/kernels/rules/{rule.pk}/approve",
                             {"version": 1, "comment": "seen it work on gemm"},
                             content_type="application/json").json()  # fmt: skip
    assert approved["status"] == "approved" and approved["approved_version"] == 1
    last = approved["transitions"][-1]
    assert (last["to_status"], last["comment"], last["version"]) == (
        "approved", "seen it work on gemm", 1)  # fmt: skip
    assert last["actor"] is not None


def test_an_approval_of_a_superseded_version_is_a_409_that_names_the_newer_one(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    rule = rule_propose(team=team, source_key="case:9", evidence={},
                        wording=Wording("Tile the k loop", "matmul-like loops"))  # fmt: skip
    editor, stale = client_for(Role.REVIEWER), client_for(Role.REVIEWER)
    edited = editor.put(f"/api/teams/kernels/rules/{rule.pk}", {"statement": "Tile by 32 only",
                        "applies_when": "AVX2 hosts"}, content_type="application/json")  # fmt: skip
    assert edited.status_code == 200

    refused = stale.post(f"/api/teams/kernels/rules/{rule.pk}/approve", {"version": 1},
                         content_type="application/json")  # fmt: skip
    assert refused.status_code == 409
    assert "version 2 was added since" in refused.json()["error"]["message"]

    page = stale.post(f"/t/kernels/review/{rule.pk}/approve/", {"version": "1"})
    assert page.status_code == 409
    html = page.content.decode()
    assert "version 2 was added since" in html and "Approve v2" in html
    rule.refresh_from_db()
    assert rule.status == "pending" and rule.approved_version is None


def test_a_vetoed_rule_cannot_be_retired_edited_or_approved_over_the_api(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    rule = rule_propose(team=team, source_key="case:9", evidence={},
                        wording=Wording("Tile the k loop", "matmul-like loops"))  # fmt: skip
    reviewer = client_for(Role.REVIEWER)
    url = f"/api/teams/kernels/rules/{rule.pk}"
    as_json = "application/json"
    vetoed = reviewer.post(f"{url}/veto", {"reason": "wrong"}, content_type=as_json)
    assert vetoed.status_code == 200

    retired = reviewer.post(f"{url}/retire", {}, content_type=as_json)
    edited = reviewer.put(url, {"statement": "Tile", "applies_when": "loops"}, content_type=as_json)
    approved = reviewer.post(f"{url}/approve", {"version": 1}, content_type=as_json)

    assert [r.status_code for r in (retired, edited, approved)] == [409, 409, 409]
    assert "it cannot be retired" in retired.json()["error"]["message"]
    assert reviewer.get(url).json()["status"] == "vetoed"
