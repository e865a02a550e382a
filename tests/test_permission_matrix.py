"""Every team-scoped page and API endpoint, for every role: allowed, forbidden, or not found.

An outsider (a member of another team only) must get 404, never 403: another team's
objects are indistinguishable from objects that do not exist.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from apps.accounts.roles import Permission, Role, role_allows
from apps.devices.evaluator import EvalSettings
from apps.devices.models import KernelTrial, Profile
from apps.devices.services import evaluation_request
from apps.memory.journal import journal_append
from apps.memory.models import MemoryVector
from apps.memory.rules import Wording, rule_propose
from apps.operators.models import ImportRun
from apps.operators.services import suite_set
from apps.reports.knowledge import FORMAT as KB_FORMAT
from apps.reports.knowledge import VERSION as KB_VERSION
from apps.reports.models import Export
from apps.runs.services import session_create, session_pause
from tests.factories import MembershipFactory, stored_builtin
from tests.operators.conftest import SAMPLES

ROLES: list[Role | str] = ["outsider", *Role]


@dataclass(frozen=True)
class Endpoint:
    name: str  # the URL name (pages) or the path (API)
    method: str
    path: str  # {team} and {member} are filled in per test
    needs: Permission
    body: dict[str, object] | None = None

    def url(self, team: str, member: str, **ids: object) -> str:
        return self.path.format(team=team, member=member, **ids)


EDIT = {"name": "Prefix sum", "description": "y[i] = x[0] + ... + x[i]", "max_abs": "0.002",
        "max_rel": "0.001", "based_on": "1"}  # fmt: skip
# Another team's knowledge-base export, with no rules: the smallest file an import takes.
KNOWLEDGE_FILE = json.dumps({"format": KB_FORMAT, "version": KB_VERSION,
                             "team": {"slug": "elsewhere", "name": "Elsewhere"},
                             "rules": []}).encode()  # fmt: skip
IMPORT = {"path": str(SAMPLES / "npukernelbench" / "level2"), "scale": "1"}  # a form's fields
API_IMPORT = {**IMPORT, "scale": 1}


PAGES = [
    *(Endpoint("section", "get", f"/t/{{team}}/{s}/", Permission.VIEW) for s in ["reports"]),
    Endpoint("reports", "get", "/t/{team}/reports/", Permission.VIEW),
    Endpoint(
        "export-create",
        "post",
        "/t/{team}/reports/new/",
        Permission.VIEW,
        {"kind": "knowledge", "format": "json"},
    ),
    Endpoint("export-download", "get", "/t/{team}/reports/{export_id}/download/", Permission.VIEW),
    Endpoint(
        "knowledge-import",
        "post",
        "/t/{team}/reports/import/",
        Permission.REVIEW,
        {"file": KNOWLEDGE_FILE},
    ),
    Endpoint("knowledge", "get", "/t/{team}/knowledge/?q=tile+the+k+loop", Permission.VIEW),
    Endpoint(
        "document", "get", "/t/{team}/knowledge/documents/doc:cpu-c:cheatsheet/", Permission.VIEW
    ),
    Endpoint("hot-memory", "get", "/t/{team}/hot-memory/", Permission.VIEW),
    Endpoint("forest", "get", "/t/{team}/forest/?operator=relu", Permission.VIEW),
    Endpoint("forest-children", "get", "/t/{team}/forest/{case_id}/children/", Permission.VIEW),
    Endpoint("case", "get", "/t/{team}/cases/{case_id}/", Permission.VIEW),
    Endpoint("compare", "get", "/t/{team}/compare/?a={case_id}&b={case_id}", Permission.VIEW),
    Endpoint(
        "compare-profile",
        "post",
        "/t/{team}/compare/profile/",
        Permission.RUN,
        {"a": "{case_id}", "b": "{case_id}"},
    ),
    Endpoint("profile-trace", "get", "/t/{team}/profiles/{profile_id}/trace.json", Permission.VIEW),
    Endpoint("profile", "get", "/t/{team}/profiles/{profile_id}/", Permission.VIEW),
    Endpoint(
        "case-measure-again", "post", "/t/{team}/cases/{case_id}/measure-again/", Permission.RUN
    ),
    Endpoint("review", "get", "/t/{team}/review/", Permission.VIEW),
    Endpoint("rule", "get", "/t/{team}/review/{rule_id}/", Permission.VIEW),
    Endpoint(
        "rule-decide",
        "post",
        "/t/{team}/review/{rule_id}/veto/",
        Permission.REVIEW,
        {"reason": "too narrow"},
    ),
    Endpoint("sessions", "get", "/t/{team}/sessions/", Permission.VIEW),
    Endpoint("session-launch", "get", "/t/{team}/sessions/new/", Permission.RUN),
    Endpoint("session", "get", "/t/{team}/sessions/{session_id}/", Permission.VIEW),
    Endpoint("session-control", "post", "/t/{team}/sessions/{session_id}/pause/", Permission.RUN),
    Endpoint("workers", "get", "/t/{team}/workers/", Permission.VIEW),
    Endpoint("workers-check", "post", "/t/{team}/workers/check/", Permission.RUN),
    Endpoint("members", "get", "/accounts/teams/{team}/members/", Permission.VIEW),
    Endpoint(
        "member-set",
        "post",
        "/accounts/teams/{team}/members/set/",
        Permission.MANAGE,
        {"username": "{member}", "role": "engineer"},
    ),
    Endpoint(
        "member-remove",
        "post",
        "/accounts/teams/{team}/members/{member}/remove/",
        Permission.MANAGE,
    ),
    Endpoint("operators", "get", "/t/{team}/operators/", Permission.VIEW),
    Endpoint("operator", "get", "/t/{team}/operators/relu/", Permission.VIEW),
    Endpoint("operator-edit", "post", "/t/{team}/operators/cumsum/edit/", Permission.RUN, EDIT),
    Endpoint("kernel-trials", "get", "/t/{team}/operators/relu/evaluations/", Permission.VIEW),
    Endpoint(
        "kernel-evaluate",
        "post",
        "/t/{team}/operators/relu/evaluations/new/",
        Permission.RUN,
        {"version": "1", "source": "int x;"},
    ),
    Endpoint(
        "kernel-trial", "get", "/t/{team}/operators/relu/evaluations/{trial_id}/", Permission.VIEW
    ),
    Endpoint("suites", "get", "/t/{team}/suites/", Permission.VIEW),
    Endpoint("suite", "get", "/t/{team}/suites/pair/", Permission.VIEW),
    Endpoint("imports", "get", "/t/{team}/imports/", Permission.VIEW),
    Endpoint("import-create", "post", "/t/{team}/imports/new/", Permission.RUN, IMPORT),
    Endpoint("import-detail", "get", "/t/{team}/imports/{import_id}/", Permission.VIEW),
]
API = [
    Endpoint("api:get_team", "get", "/api/teams/{team}", Permission.VIEW),
    Endpoint("api:list_members", "get", "/api/teams/{team}/members", Permission.VIEW),
    Endpoint(
        "api:set_member",
        "put",
        "/api/teams/{team}/members/{member}",
        Permission.MANAGE,
        {"role": "engineer"},
    ),
    Endpoint(
        "api:remove_member", "delete", "/api/teams/{team}/members/{member}", Permission.MANAGE
    ),
    Endpoint("api:list_workers", "get", "/api/teams/{team}/workers", Permission.VIEW),
    Endpoint("api:check_workers", "post", "/api/teams/{team}/workers/check", Permission.RUN),
    Endpoint("api:list_operators", "get", "/api/teams/{team}/operators", Permission.VIEW),
    Endpoint("api:get_operator", "get", "/api/teams/{team}/operators/relu", Permission.VIEW),
    Endpoint(
        "api:edit_operator",
        "patch",
        "/api/teams/{team}/operators/cumsum",
        Permission.RUN,
        {"description": "y[i] = x[0] + ... + x[i]"},
    ),
    Endpoint("api:list_suites", "get", "/api/teams/{team}/suites", Permission.VIEW),
    Endpoint("api:get_suite", "get", "/api/teams/{team}/suites/pair", Permission.VIEW),
    Endpoint("api:create_import", "post", "/api/teams/{team}/imports", Permission.RUN, API_IMPORT),
    Endpoint("api:list_imports", "get", "/api/teams/{team}/imports", Permission.VIEW),
    Endpoint("api:get_import", "get", "/api/teams/{team}/imports/{import_id}", Permission.VIEW),
    Endpoint("api:list_rules", "get", "/api/teams/{team}/rules", Permission.VIEW),
    Endpoint("api:get_rule", "get", "/api/teams/{team}/rules/{rule_id}", Permission.VIEW),
    Endpoint(
        "api:reserve_rule", "post", "/api/teams/{team}/rules/{rule_id}/reserve", Permission.REVIEW
    ),
    Endpoint(
        "api:approve_rule",
        "post",
        "/api/teams/{team}/rules/{rule_id}/approve",
        Permission.REVIEW,
        {"version": 1},
    ),
    Endpoint(
        "api:veto_rule",
        "post",
        "/api/teams/{team}/rules/{rule_id}/veto",
        Permission.REVIEW,
        {"reason": "only true on one host"},
    ),
    Endpoint(
        "api:edit_rule",
        "put",
        "/api/teams/{team}/rules/{rule_id}",
        Permission.REVIEW,
        {"statement": "Tile by 32", "applies_when": "small caches"},
    ),
    Endpoint(
        "api:retire_rule", "post", "/api/teams/{team}/rules/{rule_id}/retire", Permission.REVIEW, {}
    ),
    Endpoint("api:list_cases", "get", "/api/teams/{team}/cases", Permission.VIEW),
    Endpoint("api:search_knowledge", "get", "/api/teams/{team}/knowledge?q=tile", Permission.VIEW),
    Endpoint("api:get_case", "get", "/api/teams/{team}/cases/{case_id}", Permission.VIEW),
    Endpoint(
        "api:case_subtree", "get", "/api/teams/{team}/cases/{case_id}/subtree", Permission.VIEW
    ),
    Endpoint(
        "api:compare_cases",
        "get",
        "/api/teams/{team}/compare?a={case_id}&b={case_id}",
        Permission.VIEW,
    ),
    Endpoint(
        "api:profile_trace",
        "get",
        "/api/teams/{team}/profiles/{profile_id}/trace",
        Permission.VIEW,
    ),
    Endpoint(
        "api:case_measurements",
        "get",
        "/api/teams/{team}/cases/{case_id}/measurements",
        Permission.VIEW,
    ),
    Endpoint(
        "api:measure_case_again",
        "post",
        "/api/teams/{team}/cases/{case_id}/measurements",
        Permission.RUN,
    ),
    Endpoint("api:list_exports", "get", "/api/teams/{team}/exports", Permission.VIEW),
    Endpoint(
        "api:create_export",
        "post",
        "/api/teams/{team}/exports",
        Permission.VIEW,
        {"kind": "knowledge", "format": "json"},
    ),
    Endpoint("api:get_export", "get", "/api/teams/{team}/exports/{export_id}", Permission.VIEW),
    Endpoint(
        "api:export_file", "get", "/api/teams/{team}/exports/{export_id}/file", Permission.VIEW
    ),
    Endpoint(
        "api:import_knowledge",
        "post",
        "/api/teams/{team}/knowledge/import",
        Permission.REVIEW,
        {"file": KNOWLEDGE_FILE},
    ),
    Endpoint("api:list_sessions", "get", "/api/teams/{team}/sessions", Permission.VIEW),
    Endpoint(
        "api:create_session",
        "post",
        "/api/teams/{team}/sessions",
        Permission.RUN,
        {"operators": ["relu"], "budgets": {"rounds": 2}},
    ),
    Endpoint("api:get_session", "get", "/api/teams/{team}/sessions/{session_id}", Permission.VIEW),
    Endpoint(
        "api:session_events",
        "get",
        "/api/teams/{team}/sessions/{session_id}/events?since=1",
        Permission.VIEW,
    ),
    Endpoint(
        "api:pause_session", "post", "/api/teams/{team}/sessions/{session_id}/pause", Permission.RUN
    ),
    Endpoint(
        "api:resume_session",
        "post",
        "/api/teams/{team}/sessions/{paused_id}/resume",
        Permission.RUN,
    ),
    Endpoint(
        "api:stop_session", "post", "/api/teams/{team}/sessions/{session_id}/stop", Permission.RUN
    ),
    Endpoint(
        "api:rerun_session", "post", "/api/teams/{team}/sessions/{session_id}/rerun", Permission.RUN
    ),
]
# Not team-scoped: any logged-in user acts on their own account.
USER_SCOPED = {
    "home",
    "tokens",
    "token-revoke",
    "api:get_me",
    "api:list_teams",
    "api:list_tokens",
    "api:create_token",
    "api:revoke_token",
    "api:openapi-json",
    "api:openapi-view",
    "api:api-root",
}
OUTSIDE_THE_MATRIX = {"login", "logout"}  # login is public; logout is tested with auth


OBJECT_IDS = (
    "import_id",
    "rule_id",
    "session_id",
    "paused_id",
    "case_id",
    "profile_id",
    "export_id",
    "trial_id",
)


def expected_status(role: Role | str, needs: Permission) -> str:
    if role == "outsider":
        return "not_found"
    return "allowed" if role_allows(role, needs) else "forbidden"


def outcome(status_code: int) -> str:
    if status_code == 404:
        return "not_found"
    if status_code == 403:
        return "forbidden"
    assert status_code < 400, f"unexpected {status_code}"
    return "allowed"


@pytest.fixture(autouse=True)
def team_objects(team, settings) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """What the endpoints name: a shared and a team-owned operator, a suite, an import, a
    shared document."""
    settings.KOPE_IMPORT_ROOTS = [SAMPLES]
    relu = stored_builtin("relu")
    stored_builtin("cumsum", team)
    suite_set(team=None, slug="pair", name="A pair", operators=[relu.operator])
    run = ImportRun.objects.create(team=team, path=str(SAMPLES), format="kernelbench")
    MemoryVector.objects.create(kind="document", key="doc:cpu-c:cheatsheet", target="cpu-c",
                                text="# cpu-c cheat sheet")  # fmt: skip
    rule = rule_propose(team=team, source_key="case:1", evidence={},
                        wording=Wording("Tile the k loop", "matmul-like loops"))  # fmt: skip
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    journal_append(session_id=session.pk, kind="session_note", payload={"text": "a note"})
    timed, _ = evaluation_request(version=relu, source_text="int x;", team=team,
                                  options=EvalSettings())  # fmt: skip
    case = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 0, "version_id": relu.pk, "target": "cpu-c", "strategy": "starting kernel",
        "outcome": "no_change", "correct": True, "source_sha256": timed.source.sha256,
        "feedback": {"evaluation_id": timed.pk}})  # fmt: skip
    paused = session_create(team=team, user=None, operators=["relu"], start=False)
    session_pause(session=paused, user=None)
    evaluation, _ = evaluation_request(version=relu, source_text="int x;", team=team,
                                       options=EvalSettings(profile=True))  # fmt: skip
    profile = Profile.objects.create(evaluation=evaluation, tool="cachegrind", case_id="one",
                                     data={}, trace={"traceEvents": []})  # fmt: skip
    export = Export.objects.create(team=team, kind="knowledge", format="json", status="done",
                                   content=b"{}", filename="kb.json")  # fmt: skip
    trial = KernelTrial.objects.create(team=team, evaluation=evaluation, name="mine.c")
    return {"import_id": run.pk, "rule_id": rule.pk, "session_id": session.pk,
            "paused_id": paused.pk, "case_id": case.pk, "profile_id": profile.pk,
            "export_id": export.pk, "trial_id": trial.pk}  # fmt: skip


def call(
    client: Client, endpoint: Endpoint, team: str, member: str, ids: dict[str, object] | None = None
) -> int:
    ids = ids or dict.fromkeys(OBJECT_IDS, 0)
    url = endpoint.url(team, member, **ids)
    body = {
        k: v.format(member=member, **ids) if isinstance(v, str) else v
        for k, v in (endpoint.body or {}).items()
    }
    if any(isinstance(v, bytes) for v in body.values()):  # a file upload
        files = {k: SimpleUploadedFile(f"{k}.json", v) for k, v in body.items()}
        response = getattr(client, endpoint.method)(url, files)
    elif endpoint.name.startswith("api:"):
        response = getattr(client, endpoint.method)(url, body, content_type="application/json")
    else:
        response = getattr(client, endpoint.method)(url, body)
    return int(response.status_code)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("endpoint", PAGES + API, ids=lambda e: f"{e.method} {e.path}")
def test_each_role_gets_what_its_permissions_allow(
    endpoint: Endpoint,
    role: Role | str,
    client_for: Callable[[Role | str], Client],
    team,
    team_objects: dict[str, object],
) -> None:
    target: User = MembershipFactory(team=team, role=Role.VIEWER).user
    MembershipFactory(team=team, role=Role.ADMIN)  # so removing a member never empties admins
    status = call(client_for(role), endpoint, team.slug, target.username, team_objects)
    assert outcome(status) == expected_status(role, endpoint.needs)


@pytest.mark.parametrize("endpoint", PAGES + API, ids=lambda e: f"{e.method} {e.path}")
def test_anonymous_is_sent_to_login_or_told_to_authenticate(
    endpoint: Endpoint, team, team_objects: dict[str, object]
) -> None:
    status = call(Client(), endpoint, team.slug, "nobody", team_objects)
    assert status == (401 if endpoint.name.startswith("api:") else 302)


@pytest.mark.parametrize("endpoint", PAGES + API, ids=lambda e: f"{e.method} {e.path}")
def test_a_team_that_does_not_exist_is_not_found(
    endpoint: Endpoint, client_for: Callable[[Role | str], Client]
) -> None:
    assert call(client_for(Role.ADMIN), endpoint, "no-such-team", "nobody") == 404


def all_url_names(resolver: URLResolver | None = None, prefix: str = "") -> set[str]:
    names: set[str] = set()
    for pattern in (resolver or get_resolver()).url_patterns:
        if isinstance(pattern, URLResolver):
            if pattern.app_name == "admin":
                continue
            namespace = f"{pattern.namespace}:" if pattern.namespace else ""
            names |= all_url_names(pattern, prefix + namespace)
        elif isinstance(pattern, URLPattern) and pattern.name:
            names.add(prefix + pattern.name)
    return names


def test_the_matrix_covers_every_endpoint_of_the_project() -> None:
    covered = {e.name for e in PAGES + API} | USER_SCOPED | OUTSIDE_THE_MATRIX
    missing = all_url_names() - covered
    assert not missing, f"endpoints with no row in the permission matrix: {sorted(missing)}"
