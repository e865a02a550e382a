"""The API against its own OpenAPI document: schemathesis generates requests for every
operation (valid and odd ones), sent with a team admin's token into the real Django app; no
answer may be a server error or break the document's response schema.

The team in the path is the token holder's team (another team's is a plain 404, covered by
the permission matrix), so the requests reach past the access check; object ids are the
team's real ones for about half the requests, generated ones otherwise.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from apps.memory.journal import journal_append
from apps.memory.rules import Wording, rule_propose
from apps.operators.models import ImportRun
from apps.reports.models import Export
from apps.runs.services import session_create
from kope_web.api import api
from tests.factories import MembershipFactory, TeamFactory, stored_builtin
from tests.operators.conftest import SAMPLES

CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


def served_schema() -> Any:
    """The document /api/openapi.json serves, bound to the WSGI app (no server needed)."""
    loaded = schemathesis.openapi.from_dict(api.get_openapi_schema(path_prefix="/api/"))
    loaded.app = get_wsgi_application()
    return loaded


schema = served_schema()


@pytest.fixture
def connection_kept_open() -> Iterator[None]:
    """What Django's test client does: a request must not close the test's transaction."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def world(db: None, settings: Any, connection_kept_open: None) -> dict[str, Any]:
    """A team with one of everything the endpoints name, and an admin's token."""
    settings.KOPE_IMPORT_ROOTS = [SAMPLES]
    team = TeamFactory(slug="fuzz")
    admin = MembershipFactory(team=team, role=Role.ADMIN).user
    viewer = MembershipFactory(team=team, role=Role.VIEWER).user
    relu = stored_builtin("relu")
    session = session_create(team=team, user=admin, operators=["relu"], start=False)
    case = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 0, "version_id": relu.pk, "target": "cpu-c", "strategy": "start",
        "outcome": "no_change", "correct": True})  # fmt: skip
    rule = rule_propose(team=team, source_key=f"case:{case.pk}", evidence={},
                        wording=Wording("Vectorize the loop", "elementwise loops"))  # fmt: skip
    run = ImportRun.objects.create(team=team, path=str(SAMPLES), format="kernelbench")
    export = Export.objects.create(team=team, kind="knowledge", format="json", status="done",
                                   content=b"{}", filename="kb.json", size=2)  # fmt: skip
    ids = {"session_id": session.pk, "case_id": case.pk, "rule_id": rule.pk,
           "import_id": run.pk, "export_id": export.pk, "a": case.pk, "b": case.pk}  # fmt: skip
    return {"slug": team.slug, "username": viewer.username, "ids": ids,
            "token": api_token_create(user=admin, name="fuzz").plaintext}  # fmt: skip


def aim_at_the_world(case: Any, world: dict[str, Any]) -> None:
    """The token holder's team always; real object ids for about half the requests."""
    real_ids = zlib.crc32(repr((case.path_parameters, case.query)).encode()) % 2 == 0
    path = dict(case.path_parameters or {})
    if "slug" in path:
        path["slug"] = world["slug"]
    if "username" in path:
        path["username"] = world["username"]
    for name in path.keys() & world["ids"].keys():
        if real_ids:
            path[name] = world["ids"][name]
    case.path_parameters = path


@schema.parametrize()
@hypothesis_settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_within_its_schema_and_never_with_a_server_error(
    case: Any, world: dict[str, Any]
) -> None:
    aim_at_the_world(case, world)
    case.call_and_validate(headers={"Authorization": f"Bearer {world['token']}"}, checks=CHECKS)
