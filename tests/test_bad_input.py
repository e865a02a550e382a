"""Bad input to the API and the pages: each is a 4xx that says what was wrong and where, never
a 500, and a refused request leaves nothing behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import ApiToken, Team
from apps.accounts.roles import Role
from apps.memory.journal import journal_append
from apps.operators.models import OperatorVersion
from apps.reports.models import Export
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create
from tests.factories import stored_builtin


@pytest.fixture
def admin(team: Team, client_for: Callable[[Role | str], Client]) -> Client:
    return client_for(Role.ADMIN)


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/teams/kernels%00"),
        ("get", "/api/teams/kernels/operators/relu%00"),
        ("get", "/api/teams/kernels/suites/%00"),
        ("put", "/api/teams/kernels/members/ann%00"),
        ("delete", "/api/teams/kernels/members/ann%00"),
    ],
)
def test_the_api_refuses_a_nul_character_in_the_url_path(
    admin: Client, method: str, url: str
) -> None:
    answer = getattr(admin, method)(url, {"role": "viewer"}, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "invalid",
        "message": "path holds a NUL character, which cannot be stored",
    }


@pytest.mark.parametrize(
    ("method", "url", "message"),
    [
        ("get", "/t/kernels/knowledge/documents/doc%00/", "path"),
        ("post", "/accounts/teams/kernels/members/ann%00/remove/", "path"),
        ("get", "/t/kernels/forest/?operator=relu%00", "query.operator"),
        ("get", "/t/kernels/knowledge/?target=cpu%00", "query.target"),
    ],
)
def test_a_page_refuses_a_nul_character_in_the_url(
    admin: Client, method: str, url: str, message: str
) -> None:
    answer = getattr(admin, method)(url)
    assert answer.status_code == 400
    assert answer["Content-Type"].startswith("text/html")  # the workbench's error page
    assert f"{message} holds a NUL character, which cannot be stored" in answer.content.decode()


@pytest.mark.parametrize("number", ["\u00b2", "\u0663"])  # superscript two, Arabic-Indic three
def test_the_operator_page_shows_the_newest_version_for_a_version_that_is_not_a_number(
    team: Team, admin: Client, number: str
) -> None:
    stored_builtin("relu", team)
    answer = admin.get(f"/t/kernels/operators/relu/?v={number}")
    assert answer.status_code == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"name": "ci"', "The body is not valid JSON: Expecting ',' delimiter: line 1 column 14"),
        (b'{"name": "\xff"}', "The body is not valid JSON: it is not UTF-8 text"),
        ("name=ci", "The body is not valid JSON: Expecting value: line 1 column 1"),
        ('["ci"]', "The body must be a JSON object, not an array"),
        ("null", "The body must be a JSON object, not null"),
        ('{"name": "ci", "name": "cd"}', "body holds the key 'name' twice"),
        (
            '{"name": 1' + "0" * 5000 + "}",
            "The body is not valid JSON: a number has over 4300 digits",
        ),
    ],
)
def test_a_body_that_is_not_one_json_object_is_refused_saying_why(
    admin: Client, body: str | bytes, message: str
) -> None:
    answer = admin.post("/api/tokens", body, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith(message)
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ({"kind": "session", "format": "json"}, "session"),
        ({"kind": "comparison", "format": "json", "a": "SESSION"}, "b"),
        ({"kind": "comparison", "format": "json", "b": "SESSION"}, "a"),
    ],
)
def test_an_export_without_its_session_names_the_missing_field(
    team: Team, admin: Client, body: dict[str, object], missing: str
) -> None:
    stored_builtin("relu", team)
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    body = {k: session.pk if v == "SESSION" else v for k, v in body.items()}
    answer = admin.post("/api/teams/kernels/exports", body, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        f"'{missing}' is missing: the id of one of the team's sessions"
    )
    assert not Export.objects.exists()


@pytest.mark.parametrize("name", ["", "   "])
def test_an_operator_edit_refuses_an_empty_name(team: Team, admin: Client, name: str) -> None:
    stored_builtin("relu", team)
    answer = admin.patch(
        "/api/teams/kernels/operators/relu", {"name": name}, content_type="application/json"
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "the name cannot be empty"
    assert OperatorVersion.objects.count() == 1


def test_a_body_nested_too_deeply_is_refused_saying_so(admin: Client) -> None:
    answer = admin.post("/api/tokens", "[" * 100_000, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "http_400",  # as ninja's own "Cannot parse request body" was
        "message": "The body is not valid JSON: it is nested too deeply",
    }


@pytest.mark.parametrize("client_kind", ["member", "anonymous"])
def test_an_unknown_api_url_answers_in_the_api_error_format(
    admin: Client, client_kind: str
) -> None:
    """It used to answer with the HTML 404 page."""
    client = admin if client_kind == "member" else Client()
    answer = client.get("/api/teams/kernels/nope")
    assert answer.status_code == 404
    assert answer.json()["error"] == {
        "code": "not_found",
        "message": "No API endpoint at /api/teams/kernels/nope; /api/docs lists them.",
    }
    assert "text/html" in admin.get("/t/kernels/nope/").headers["Content-Type"]


@pytest.mark.parametrize("debug", [False, True])
def test_an_api_path_with_a_slash_too_many_is_named_in_json(
    admin: Client, settings: Any, debug: bool
) -> None:
    """With DEBUG on, Django's own 404 page listed every URL pattern instead."""
    settings.DEBUG = debug
    answer = admin.get("/api/teams/")
    assert answer.status_code == 404 and answer.headers["Content-Type"] == "application/json"
    assert answer.json()["error"]["message"] == (
        "No API endpoint at /api/teams/: API paths end without a slash (/api/teams)."
    )
    assert Client().get("/api/teams/").status_code == 404, "answered without a login too"


@pytest.mark.parametrize(
    ("kernels", "message"),
    [
        ({"relu": "  \n"}, "starting kernels that are empty: 'relu'"),
        ({"": "int x;"}, "starting kernels for operators not in the session: ''"),
    ],
)
def test_a_session_refuses_an_empty_or_unnamed_starting_kernel(
    team: Team, admin: Client, kernels: dict[str, str], message: str
) -> None:
    """An empty kernel was taken as no upload; an unnamed one was named by an empty string."""
    stored_builtin("relu", team)
    body = {"operators": ["relu"], "starting_kernels": kernels}
    answer = admin.post("/api/teams/kernels/sessions", body, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == message
    assert not OptimizationSession.objects.exists()


@pytest.mark.parametrize(
    ("path", "body", "where", "kind"),
    [
        ("sessions", {"operators": ["relu"], "seed": "7"}, ["seed"], "integer"),
        ("sessions", {"operators": ["relu"], "budgets": {"rounds": 2.0}},
         ["budgets", "rounds"], "integer"),
        ("sessions", {"operators": ["relu"], "measurement": {"repeats": True}},
         ["measurement", "repeats"], "integer"),
        ("exports", {"kind": "session", "format": "json", "session": "1"}, ["session"], "integer"),
        ("imports", {"path": "x", "scale": "0.5"}, ["scale"], "number"),
    ],
)  # fmt: skip
def test_a_number_given_as_text_true_or_a_fraction_is_refused_naming_the_field(
    team: Team, admin: Client, path: str, body: dict[str, object], where: list[str], kind: str
) -> None:
    stored_builtin("relu", team)

    answer = admin.post(f"/api/teams/kernels/{path}", body, content_type="application/json")

    assert answer.status_code == 422
    [detail] = answer.json()["error"]["details"]
    assert detail["loc"][2:] == where and detail["msg"] == f"Input should be a valid {kind}"
    assert not OptimizationSession.objects.exists() and not Export.objects.exists()


@pytest.mark.parametrize(
    ("body", "where"),
    [({"operators": ["relu\ud800"]}, ["operators", 0]),
     ({"operators": ["relu"], "label": "x\ud800"}, ["label"])],
)  # fmt: skip
def test_a_session_string_that_is_not_unicode_text_is_refused_naming_the_field(
    team: Team, admin: Client, body: dict[str, object], where: list[object]
) -> None:
    """A lone surrogate in an operator's slug reached PostgreSQL and answered 500."""
    stored_builtin("relu", team)

    answer = admin.post("/api/teams/kernels/sessions", body, content_type="application/json")

    assert answer.status_code == 422
    [detail] = answer.json()["error"]["details"]
    assert detail["loc"][2:] == where and detail["type"] == "string_unicode"
    assert not OptimizationSession.objects.exists()


def test_a_tolerance_given_as_a_whole_number_is_a_number(team: Team, admin: Client) -> None:
    stored_builtin("relu", team)

    edited = admin.patch("/api/teams/kernels/operators/relu", {"max_rel": 1},
                         content_type="application/json")  # fmt: skip

    assert edited.status_code == 201 and edited.json()["spec"]["max_rel"] == 1.0


PAGED = ["/api/teams", "/api/tokens", "/api/teams/kernels/members", "/api/teams/kernels/rules",
         "/api/teams/kernels/operators", "/api/teams/kernels/suites", "/api/teams/kernels/imports",
         "/api/teams/kernels/exports", "/api/teams/kernels/sessions",
         "/api/teams/kernels/sessions/{session}/events", "/api/teams/kernels/cases"]  # fmt: skip


@pytest.mark.parametrize("url", PAGED)
def test_a_page_past_what_the_database_can_count_to_is_empty(
    team: Team, admin: Client, url: str
) -> None:
    """PostgreSQL's OFFSET is a bigint: the journal's events, sliced in the database, answered
    500 ("bigint out of range") for a larger one. Past the end, a page is empty."""
    stored_builtin("relu")
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    journal_append(session_id=session.pk, kind="session_note", payload={"text": "one"})
    url = url.format(session=session.pk)

    for offset in [2**63 - 1, 2**63, 10**30]:
        page = admin.get(url, {"offset": str(offset)})
        assert (page.status_code, page.json()["items"]) == (200, []), (offset, page.content)
