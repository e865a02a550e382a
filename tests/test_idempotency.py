"""`Idempotency-Key` on the API: a change sent again with its key is done once, and the retry
gets the first answer (apps/accounts/idempotency.py). The race of two at once is in
tests/test_concurrent_actions.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, RequestFactory
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerDown

from apps.accounts.idempotency import fingerprint
from apps.accounts.models import ApiToken, IdempotentRequest, Membership, Team
from apps.accounts.roles import Role
from apps.accounts.services import api_token_create
from apps.memory.models import Rule
from apps.runs.models import OptimizationSession
from kope_web.api import api
from tests.factories import MembershipFactory, stored_builtin
from tests.test_permission_matrix import KNOWLEDGE_FILE

LAUNCH = {"operators": ["relu"], "budgets": {"rounds": 2}}


@pytest.fixture
def admin(team: Team) -> User:
    """The knowledge import below needs a reviewer's rights, the rest an engineer's."""
    stored_builtin("relu")
    user: User = MembershipFactory(team=team, role=Role.ADMIN).user
    return user


def script(user: User) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=user, name='ci').plaintext}")


def post(client: Client, path: str, body: Any, key: str | None = "launch-1") -> Any:
    headers = {} if key is None else {"Idempotency-Key": key}
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(path, data, content_type="application/json", headers=headers)


def sessions_url(team: Team) -> str:
    return f"/api/teams/{team.slug}/sessions"


def test_a_launch_sent_again_with_its_key_gets_the_first_answer_and_makes_one_session(
    team: Team, admin: User
) -> None:
    client = script(admin)

    first = post(client, sessions_url(team), LAUNCH)
    # the same object written another way is the same request
    again = post(
        client, sessions_url(team), b'{ "budgets": {"rounds": 2},\n "operators": ["relu"] }'
    )

    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again["Content-Type"] == first["Content-Type"] == "application/json; charset=utf-8"
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert OptimizationSession.objects.count() == 1
    assert post(client, sessions_url(team), LAUNCH, key=None).status_code == 201  # no key: twice
    assert OptimizationSession.objects.count() == 2


def test_a_key_sent_with_another_request_is_refused_and_does_nothing(
    team: Team, admin: User
) -> None:
    client = script(admin)
    session_id = post(client, sessions_url(team), LAUNCH).json()["id"]

    other_body = post(client, sessions_url(team), {**LAUNCH, "seed": 7})
    other_path = post(client, f"{sessions_url(team)}/{session_id}/rerun", {})

    for answer in (other_body, other_path):
        assert answer.status_code == 422
        error = answer.json()["error"]
        assert error["code"] == "idempotency_key_reused"
        assert f"(POST /api/teams/{team.slug}/sessions)" in error["message"]
    assert OptimizationSession.objects.count() == 1


def test_a_refused_request_keeps_no_answer_so_its_corrected_retry_runs(
    team: Team, admin: User
) -> None:
    client = script(admin)

    refused = post(client, sessions_url(team), {"operators": ["no-such-operator"]})
    corrected = post(client, sessions_url(team), LAUNCH)

    assert refused.status_code in (400, 404) and corrected.status_code == 201
    assert OptimizationSession.objects.count() == 1
    assert IdempotentRequest.objects.get().status == 201


def test_keys_are_each_users_own(team: Team, admin: User) -> None:
    colleague = MembershipFactory(team=team, role=Role.ENGINEER).user

    mine = post(script(admin), sessions_url(team), LAUNCH)
    theirs = post(script(colleague), sessions_url(team), LAUNCH)

    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]


def unanswered_claim(user: User, team: Team, age: timedelta) -> None:
    """A first launch with the key "launch-1" still running, or lost with its process."""
    request = RequestFactory().post(sessions_url(team), json.dumps(LAUNCH),
                                    content_type="application/json")  # fmt: skip
    IdempotentRequest.objects.create(
        user=user, key="launch-1", method="POST", path=sessions_url(team),
        fingerprint=fingerprint(request), claimed_at=timezone.now() - age,
    )  # fmt: skip


def test_a_retry_while_the_first_is_answered_is_a_conflict_and_after_a_lost_one_runs(
    team: Team, admin: User
) -> None:
    client = script(admin)
    unanswered_claim(admin, team, age=timedelta(seconds=3))

    running = post(client, sessions_url(team), LAUNCH)

    assert running.status_code == 409
    assert "still being answered" in running.json()["error"]["message"]
    assert not OptimizationSession.objects.exists()

    IdempotentRequest.objects.update(claimed_at=timezone.now() - timedelta(minutes=6))
    lost = post(client, sessions_url(team), LAUNCH)

    assert lost.status_code == 201
    assert IdempotentRequest.objects.get().status == 201
    assert OptimizationSession.objects.count() == 1


@contextmanager
def database_refusing(statement: str) -> Iterator[None]:
    """PostgreSQL fails every UPDATE or DELETE of a kept request, as a full disk would."""
    table = IdempotentRequest._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION USING ERRCODE = 'disk_full', "
            "MESSAGE = 'could not extend file: No space left on device'; END $$"
        )
        cursor.execute(f"CREATE TRIGGER refuse BEFORE {statement} ON {table} "
                       "FOR EACH ROW EXECUTE FUNCTION refuse()")  # fmt: skip
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER refuse ON {table}")
        cursor.execute("DROP FUNCTION refuse()")


def test_an_answer_that_cannot_be_kept_still_reaches_its_client_and_is_not_done_twice(
    team: Team, admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    client = script(admin)
    with database_refusing("UPDATE"), caplog.at_level(logging.ERROR):
        launched = post(client, sessions_url(team), LAUNCH)

    assert launched.status_code == 201
    assert launched.json()["id"] == OptimizationSession.objects.get().pk
    assert "Could not keep the answer to POST" in caplog.text
    # the key stays claimed with no answer: a retry waits, as after a crash, not a second run
    assert post(client, sessions_url(team), LAUNCH).status_code == 409
    assert OptimizationSession.objects.count() == 1


def test_a_refusal_whose_key_cannot_be_let_go_still_reaches_its_client(
    team: Team, admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    with database_refusing("DELETE"), caplog.at_level(logging.ERROR):
        refused = post(script(admin), sessions_url(team), {"operators": ["no-such-operator"]})

    assert refused.status_code in (400, 404)
    assert "no-such-operator" in refused.json()["error"]["message"]
    assert "Could not let the Idempotency-Key launch-1 go" in caplog.text


def test_a_launch_the_broker_refuses_is_kept_and_its_retry_gets_the_first_answer(
    transactional_db: None, team: Team, admin: User, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The session is committed before its first iteration is sent: a broker that refused it
    turned the launch into a 500, which let the key go, and the retry launched a second one.
    A starting agent worker runs the one kept (tests/runs/test_workers.py)."""
    from apps.runs.tasks import advance_session

    def broker_down(*args: object) -> None:
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(advance_session, "delay", broker_down)
    client = script(admin)
    with caplog.at_level(logging.ERROR):
        launched = post(client, sessions_url(team), LAUNCH)
    retried = post(client, sessions_url(team), LAUNCH)

    assert launched.status_code == 201
    assert launched.json()["status"] == OptimizationSession.objects.get().status == "queued"
    assert "the broker refused its next iteration" in caplog.text
    assert retried.content == launched.content and retried["Idempotent-Replayed"] == "true"
    assert OptimizationSession.objects.count() == 1
    # resume and re-run send their message the same way
    session_url = f"{sessions_url(team)}/{launched.json()['id']}"
    assert post(client, f"{session_url}/pause", {}, key=None).status_code == 200
    resumed = post(client, f"{session_url}/resume", {}, key="resume-1")
    rerun = post(client, f"{session_url}/rerun", {}, key="rerun-1")
    assert (resumed.status_code, resumed.json()["status"]) == (200, "running")
    assert rerun.status_code == 201
    assert post(client, f"{session_url}/rerun", {}, key="rerun-1").content == rerun.content
    assert OptimizationSession.objects.count() == 2


def test_keys_a_day_old_are_forgotten_everyones_at_once(team: Team, admin: User) -> None:
    client = script(admin)
    colleague = MembershipFactory(team=team, role=Role.ENGINEER).user
    post(client, sessions_url(team), LAUNCH)
    post(script(colleague), sessions_url(team), LAUNCH, key="gone-for-good")
    IdempotentRequest.objects.update(claimed_at=timezone.now() - timedelta(hours=25))

    later = post(client, sessions_url(team), LAUNCH)

    assert later.status_code == 201 and "Idempotent-Replayed" not in later
    assert OptimizationSession.objects.count() == 3
    assert list(IdempotentRequest.objects.values_list("user", "key")) == [(admin.pk, "launch-1")]


def multipart(boundary: str, content: bytes) -> bytes:
    return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"kb.json\"\r\nContent-Type: application/json\r\n\r\n").encode() + (
        content + f"\r\n--{boundary}--\r\n".encode())  # fmt: skip


def test_an_upload_sent_again_is_the_same_request_whatever_its_boundary(
    team: Team, admin: User
) -> None:
    client = script(admin)
    url = f"/api/teams/{team.slug}/knowledge/import"

    def upload(boundary: str, content: bytes) -> Any:
        return client.post(url, multipart(boundary, content), headers={"Idempotency-Key": "kb"},
                           content_type=f"multipart/form-data; boundary={boundary}")  # fmt: skip

    first = upload("first-boundary", KNOWLEDGE_FILE)
    again = upload("another-boundary", KNOWLEDGE_FILE)
    changed = upload("first-boundary", KNOWLEDGE_FILE.replace(b'"rules": []', b'"rules": [ ]'))

    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true" and again.content == first.content
    assert changed.status_code == 422
    assert not Rule.objects.exists()


def test_a_token_is_never_kept_so_its_request_refuses_a_key(admin: User) -> None:
    client = Client()
    client.force_login(admin)
    before = ApiToken.objects.count()

    refused = post(client, "/api/tokens", {"name": "ci"}, key="token-1")

    assert refused.status_code == 400
    assert "takes no Idempotency-Key: its answer holds the token's secret" in (
        refused.json()["error"]["message"])  # fmt: skip
    assert ApiToken.objects.count() == before and not IdempotentRequest.objects.exists()


@pytest.mark.parametrize(("key", "length"), [("", 0), ("k" * 256, 256), ("a\tb", 3)])
def test_a_key_that_is_not_one_is_refused_with_what_is_wrong(
    team: Team, admin: User, key: str, length: int
) -> None:
    answer = post(script(admin), sessions_url(team), LAUNCH, key=key)

    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "The Idempotency-Key header must be 1 to 255 printable ASCII characters, "
        f"got {length} characters")  # fmt: skip
    assert not OptimizationSession.objects.exists()


def test_the_openapi_document_offers_the_key_on_every_change_but_the_token(db: None) -> None:
    paths = api.get_openapi_schema(path_prefix="/api/")["paths"]

    def takes_key(path: str, method: str) -> bool:
        names = [p["name"] for p in paths[path][method].get("parameters", [])]
        return "Idempotency-Key" in names

    assert takes_key("/api/teams/{slug}/sessions", "post")
    assert takes_key("/api/teams/{slug}/operators/{operator}", "patch")
    assert takes_key("/api/tokens/{token_id}", "delete")
    assert not takes_key("/api/teams/{slug}/sessions", "get")
    assert not takes_key("/api/tokens", "post")


def test_a_member_removed_since_gets_what_the_request_now_gets_not_the_kept_answer(
    team: Team, admin: User
) -> None:
    client = script(admin)
    launched = post(client, sessions_url(team), LAUNCH)
    Membership.objects.filter(user=admin, team=team).delete()

    replayed = post(client, sessions_url(team), LAUNCH)

    assert launched.status_code == 201
    assert replayed.status_code == 404 and "Idempotent-Replayed" not in replayed
    assert replayed.content == post(client, sessions_url(team), LAUNCH, key=None).content
    admin.is_active = False  # a deactivated user is not let in at all
    admin.save(update_fields=["is_active"])
    assert post(client, sessions_url(team), LAUNCH).status_code == 401
    assert OptimizationSession.objects.count() == 1
