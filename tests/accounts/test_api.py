from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.models import ApiToken, Team
from apps.accounts.roles import Role
from apps.accounts.services import api_token_create, api_token_revoke
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_a_script_with_a_token_reads_its_teams(user: User, team) -> None:
    MembershipFactory(user=user, team=team, role=Role.ENGINEER)
    issued = api_token_create(user=user, name="ci")
    response = Client().get("/api/teams", **bearer(issued.plaintext))
    assert response.status_code == 200
    assert response.json()["items"] == [{"slug": "kernels", "name": "Kernels", "role": "engineer"}]
    assert response.json()["count"] == 1


def test_it_rejects_a_revoked_token(user: User) -> None:
    issued = api_token_create(user=user, name="ci")
    api_token_revoke(user=user, token_id=issued.token.pk)
    response = Client().get("/api/me", **bearer(issued.plaintext))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


@pytest.mark.parametrize("token", ["", "kope_", "kope_12345678_", "nonsense", "kope_zzzzzzzz_x"])
def test_it_rejects_malformed_or_unknown_tokens(token: str, user: User) -> None:
    api_token_create(user=user, name="ci")
    assert Client().get("/api/me", **bearer(token)).status_code == 401


def test_it_rejects_a_token_whose_secret_is_altered(user: User) -> None:
    issued = api_token_create(user=user, name="ci")
    altered = issued.plaintext[:-1] + ("A" if issued.plaintext[-1] != "A" else "B")
    assert Client().get("/api/me", **bearer(altered)).status_code == 401


def test_tokens_are_stored_only_as_hashes(user: User) -> None:
    issued = api_token_create(user=user, name="ci")
    stored = ApiToken.objects.values_list("prefix", "secret_hash").get()
    assert issued.plaintext not in json.dumps(list(stored))
    assert issued.plaintext.split("_")[-1] not in stored[1]


def test_token_use_is_recorded(user: User) -> None:
    issued = api_token_create(user=user, name="ci")
    Client().get("/api/me", **bearer(issued.plaintext))
    issued.token.refresh_from_db()
    assert issued.token.last_used_at is not None


def test_a_token_is_shown_once_at_creation_and_listed_without_its_secret(user: User) -> None:
    client = Client()
    client.force_login(user)
    created = client.post(
        "/api/tokens",
        {"name": "nightly"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=csrf_token(client),
    )
    assert created.status_code == 201
    plaintext = created.json()["token"]
    listed = client.get("/api/tokens").json()["items"]
    assert [t["name"] for t in listed] == ["nightly"]
    assert plaintext not in json.dumps(listed)
    assert Client().get("/api/me", **bearer(plaintext)).json()["username"] == user.username


def csrf_token(client: Client) -> str:
    client.get("/accounts/tokens/")
    return str(client.cookies["csrftoken"].value)


def test_a_session_post_to_the_api_without_csrf_token_is_refused(user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post("/api/tokens", {"name": "x"}, content_type="application/json")
    assert response.status_code == 403
    assert not ApiToken.objects.exists()


def test_a_session_post_to_the_api_with_csrf_token_is_accepted(user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(
        "/api/tokens",
        {"name": "x"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=csrf_token(client),
    )
    assert response.status_code == 201


def test_a_token_post_needs_no_csrf_token(user: User) -> None:
    issued = api_token_create(user=user, name="ci")
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/api/tokens", {"name": "x"}, content_type="application/json", **bearer(issued.plaintext)
    )
    assert response.status_code == 201


def test_a_page_form_post_without_csrf_token_is_refused(user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post("/accounts/tokens/", {"name": "x"}).status_code == 403
    with_token = client.post(
        "/accounts/tokens/", {"name": "x", "csrfmiddlewaretoken": csrf_token(client)}
    )
    assert with_token.status_code == 200
    assert ApiToken.objects.filter(name="x").count() == 1


def test_an_htmx_post_carries_the_csrf_token_in_hx_headers(user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = client.get("/accounts/tokens/").content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in page


def test_validation_errors_have_a_machine_readable_code(user: User) -> None:
    issued = api_token_create(user=user, name="ci")
    response = Client().post(
        "/api/tokens", {"name": ""}, content_type="application/json", **bearer(issued.plaintext)
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"


def test_another_teams_member_list_is_a_404_with_an_error_code(user: User, other_team) -> None:
    issued = api_token_create(user=user, name="ci")
    response = Client().get("/api/teams/elsewhere/members", **bearer(issued.plaintext))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_lists_are_paginated(user: User) -> None:
    for n in range(5):
        api_token_create(user=user, name=f"t{n}")
    issued = api_token_create(user=user, name="reader")
    page = Client().get("/api/tokens?limit=2&offset=2", **bearer(issued.plaintext)).json()
    assert page["count"] == 6
    assert len(page["items"]) == 2


def test_the_last_admin_cannot_be_demoted(team, user: User) -> None:
    MembershipFactory(user=user, team=team, role=Role.ADMIN)
    issued = api_token_create(user=user, name="ci")
    response = Client().put(
        f"/api/teams/kernels/members/{user.username}",
        {"role": "viewer"},
        content_type="application/json",
        **bearer(issued.plaintext),
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
    assert user.memberships.get().role == Role.ADMIN


def test_the_openapi_document_is_served_to_a_logged_in_user_and_names_every_operation(
    user: User,
) -> None:
    client = Client()
    client.force_login(user)
    schema = client.get("/api/openapi.json").json()
    operations = {op["operationId"] for path in schema["paths"].values() for op in path.values()}
    assert {"apps_accounts_api_list_teams", "apps_devices_api_check_workers"} <= operations
    assert Client().get("/api/openapi.json").status_code == 302


def test_an_oversized_or_deeply_nested_body_is_refused_with_a_code(
    team: Team, client_for: Callable[[Role], Client], settings: Any
) -> None:
    client = client_for(Role.ADMIN)
    url = f"/api/teams/{team.slug}/sessions"
    nested = client.post(url, "[" * 100_000 + "]" * 100_000, content_type="application/json")
    assert nested.status_code == 400 and nested.json()["error"]["code"] == "http_400"
    big = '{"label": "' + "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) + '"}'
    refused = client.post(url, big, content_type="application/json")
    assert refused.status_code == 413
    assert refused.json()["error"] == {
        "code": "request_too_large",
        "message": f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes "
        "(KOPE_MAX_REQUEST_BYTES).",
        "limit": settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    }


def test_a_nul_character_anywhere_in_a_request_is_refused_naming_where(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    client = client_for(Role.ADMIN)
    body = client.post("/api/tokens", {"name": "ci\u0000"}, content_type="application/json")
    assert body.status_code == 400
    assert body.json()["error"]["message"] == (
        "body.name holds a NUL character, which cannot be stored"
    )
    nested = client.post(f"/api/teams/{team.slug}/sessions",
                         {"operators": ["relu"], "starting_kernels": {"relu": "int\u0000x;"}},
                         content_type="application/json")  # fmt: skip
    assert (
        nested.status_code == 400
        and "body.starting_kernels.relu" in nested.json()["error"]["message"]
    )
    query = client.get(f"/api/teams/{team.slug}/cases?operator=relu%00")
    assert query.status_code == 400 and "query.operator" in query.json()["error"]["message"]
    assert not ApiToken.objects.filter(name__startswith="ci").exists()
