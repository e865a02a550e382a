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
