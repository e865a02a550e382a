"""Reports over the API: a session report made on request and downloaded, exports listed in
pages, another team's export a 404; the knowledge base exported by one team's script and
imported by another's (reviewers only), a bad file refused with a code."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from kombu.exceptions import OperationalError as BrokerDown

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.models import Rule
from apps.reports import services
from apps.reports.models import Export
from apps.reports.tasks import make_export
from tests.factories import MembershipFactory
from tests.reports.sessions import journal_session
from tests.reports.test_knowledge import knowledge_of


def admin_of(team: Team) -> Client:
    client = Client()
    client.force_login(MembershipFactory(team=team, role=Role.ADMIN).user)
    return client


def test_a_session_report_is_made_listed_and_downloaded(
    team: Team, other_team: Team, client_for: Callable[[Role], Client]
) -> None:
    session = journal_session(team, best={"relu": 2.0, "gelu": 4.0})
    client = client_for(Role.VIEWER)
    url = f"/api/teams/{team.slug}/exports"

    made = client.post(url, {"kind": "session", "format": "csv", "session": session.pk},
                       content_type="application/json")  # fmt: skip
    assert made.status_code == 201, made.content
    export = made.json()
    assert export["status"] == "done" and export["file"].endswith(f"/exports/{export['id']}/file")
    csv = client.get(export["file"])
    assert csv["Content-Disposition"].startswith("attachment;")
    assert "relu" in csv.content.decode() and "gelu" in csv.content.decode()
    listed = client.get(f"{url}?limit=1").json()
    assert listed["count"] == 1 and listed["items"][0]["id"] == export["id"]

    wrong = client.post(url, {"kind": "knowledge", "format": "pdf"},
                        content_type="application/json")  # fmt: skip
    assert wrong.status_code == 400 and "comes as md, json" in wrong.json()["error"]["message"]
    assert client.post(url, {"kind": "session", "format": "csv", "session": 999999},
                       content_type="application/json").status_code == 404  # fmt: skip
    outsider = admin_of(other_team)
    path = f"/api/teams/{other_team.slug}/exports/{export['id']}"
    assert outsider.get(path).status_code == 404
    assert outsider.get(f"{path}/file").status_code == 404


def test_the_knowledge_base_goes_from_one_teams_script_to_anothers_review_queue(
    team: Team, other_team: Team
) -> None:
    knowledge_of(team)
    exported = admin_of(team).post(f"/api/teams/{team.slug}/exports",
                                   {"kind": "knowledge", "format": "json"},
                                   content_type="application/json").json()  # fmt: skip
    raw = admin_of(team).get(exported["file"]).content
    url = f"/api/teams/{other_team.slug}/knowledge/import"

    viewer = Client()
    viewer.force_login(MembershipFactory(team=other_team, role=Role.VIEWER).user)
    upload = SimpleUploadedFile("kb.json", raw, content_type="application/json")
    assert viewer.post(url, {"file": upload}).status_code == 403
    reviewer = Client()
    reviewer.force_login(MembershipFactory(team=other_team, role=Role.REVIEWER).user)
    done = reviewer.post(url, {"file": SimpleUploadedFile("kb.json", raw)})
    assert done.status_code == 201 and done.json()["kind"] == "knowledge_import"
    pending = Rule.objects.filter(team=other_team, status=Rule.Status.PENDING)
    assert pending.count() == 2

    bad = reviewer.post(url, {"file": SimpleUploadedFile("kb.json", b'{"rules": 3}')})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_import_file"
    assert "kb.json" in bad.json()["error"]["message"]
    assert Rule.objects.filter(team=other_team).count() == 2


def broker_down(*args: object) -> None:
    raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def test_a_large_export_the_broker_refuses_fails_saying_so_instead_of_a_500(
    transactional_db: None, team: Team, client_for: Callable[[Role], Client],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The export is committed before its message is sent: a refusal answered 500 and left it
    queued for ever (no worker would ever make it, and the page polled it for ever)."""
    monkeypatch.setattr(services, "INLINE_ROWS", 0)
    monkeypatch.setattr(make_export, "delay", broker_down)
    session = journal_session(team, best={"gemm": 5.0})
    client = client_for(Role.VIEWER)

    with caplog.at_level(logging.ERROR):
        made = client.post(f"/api/teams/{team.slug}/exports",
                           {"kind": "session", "format": "pdf", "session": session.pk},
                           content_type="application/json")  # fmt: skip

    assert made.status_code == 201, made.content
    assert made.json()["status"] == Export.objects.get().status == "failed"
    assert made.json()["error"].startswith("the agent worker's queue refused it")
    assert "the broker refused it" in caplog.text
