"""The API against its own OpenAPI document: schemathesis generates requests for every
operation (valid and odd ones) in all its phases (the document's examples, coverage of each
parameter's edges, fuzzing, and stateful sequences that feed one answer's ids into the next
request), sent with a team admin's token into the real Django app; no answer may be a server
error, or break the document (a status, body, content type or header it does not declare).

The team in the path is the token holder's team (another team's is a plain 404, covered by
the permission matrix), so the requests reach past the access check; object ids are the
team's real ones for about half the requests, generated ones otherwise. The document's
component names are each one schema (ninja silently reuses a name given twice).
"""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.test import Client
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from ninja import NinjaAPI
from ninja.openapi.schema import OpenAPISchema
from schemathesis.specs.openapi.checks import positive_data_acceptance

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

# Every check schemathesis has but one: a request that fits the document may still be refused
# by a rule no schema states (a file that is no knowledge-base export, a rule another reviewer
# holds), which positive_data_acceptance would count as a failure.
EXCLUDED_CHECKS = [positive_data_acceptance]
EXAMPLES = 10  # fuzzed requests per operation
STATEFUL_RUNS, STATEFUL_STEPS = 25, 6


def served_schema() -> Any:
    """The document /api/openapi.json serves, bound to the WSGI app (no server needed)."""
    loaded = schemathesis.openapi.from_dict(api.get_openapi_schema(path_prefix="/api/"))
    loaded.app = get_wsgi_application()
    # The API ignores query parameters it does not know (a cache-busting `_=`), as most do.
    loaded.config.generation.update(allow_extra_parameters=False)
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


def admins_token(world: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {world['token']}"}


@schema.parametrize()
@hypothesis_settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_within_its_schema_and_never_with_a_server_error(
    case: Any, world: dict[str, Any]
) -> None:
    aim_at_the_world(case, world)
    case.call_and_validate(headers=admins_token(world), excluded_checks=EXCLUDED_CHECKS)


def test_sequences_of_operations_answer_within_the_schema_and_never_with_a_server_error(
    world: dict[str, Any],
) -> None:
    """Stateful: schemathesis links operations by the ids one answers and another takes (a
    session launched, then paused, re-run, read), and checks what follows across the steps
    too (a deleted object stays gone, a created one can be read)."""

    class AimedAtTheWorld(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Each sequence starts from the same world, so that hypothesis, replaying one to
            # shrink it, sees the answers it saw the first time (else: FlakyStrategyDefinition).
            self.savepoint = transaction.savepoint()

        def teardown(self) -> None:
            transaction.savepoint_rollback(self.savepoint)

        def before_call(self, case: Any) -> None:
            aim_at_the_world(case, world)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": admins_token(world)}

        def validate_response(self, response: Any, case: Any, *args: Any, **kwargs: Any) -> None:
            case.validate_response(response, headers=admins_token(world),  # sent, not generated
                                   excluded_checks=EXCLUDED_CHECKS, transport_kwargs=kwargs,
                                   recorder=self.recorder)  # fmt: skip

    AimedAtTheWorld.run(settings=hypothesis_settings(
        max_examples=STATEFUL_RUNS, stateful_step_count=STATEFUL_STEPS, deadline=None,
        suppress_health_check=list(HealthCheck),
    ))  # fmt: skip


class DefinitionsKept(OpenAPISchema):
    """ninja's document, built keeping every definition each component name was given: ninja
    keeps the last under the name, so a second schema of the same name silently replaces the
    first wherever either is used."""

    def __init__(self, api: NinjaAPI, path_prefix: str) -> None:
        self.given: defaultdict[str, set[str]] = defaultdict(set)
        super().__init__(api, path_prefix)

    def add_schema_definitions(self, definitions: dict[str, Any]) -> None:
        for name, definition in definitions.items():
            self.given[name].add(json.dumps(definition, sort_keys=True))
        super().add_schema_definitions(definitions)


def references(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        if isinstance(value.get("$ref"), str):
            yield value["$ref"]
        for item in value.values():
            yield from references(item)
    elif isinstance(value, list):
        for item in value:
            yield from references(item)


def test_each_component_name_is_one_schema_and_every_reference_finds_it(
    admin_client_of_team: Client,
) -> None:
    served = admin_client_of_team.get("/api/openapi.json").json()
    built = DefinitionsKept(api, path_prefix="/api/")

    reused = {name: len(found) for name, found in built.given.items() if len(found) > 1}
    components = served["components"]["schemas"]
    dangling = {ref for ref in references(served)
                if ref.removeprefix("#/components/schemas/") not in components}  # fmt: skip
    assert not reused, f"component names given to several schemas (name: how many): {reused}"
    assert not dangling
    assert components.keys() == built.given.keys() | {"Error"}  # the API's error answers'
    assert "Error" not in built.given
