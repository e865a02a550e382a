"""The Reports page: every export with its status, who asked and when, the file when ready;
the forms; downloads scoped to the team; the import for reviewers."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.models import Rule
from apps.memory.rules import Wording, rule_propose
from apps.reports import services
from apps.reports.models import Export
from apps.reports.tasks import make_export
from tests.factories import MembershipFactory
from tests.reports.sessions import journal_session
from tests.reports.test_api import broker_down


def test_an_engineer_asks_for_a_report_and_downloads_it_from_the_list(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    session = journal_session(team, best={"gemm": 5.0})
    client = client_for(Role.ENGINEER)

    form = {"kind": "session", "session": session.pk, "format": "html"}
    response = client.post(f"/t/{team.slug}/reports/new/", form)

    assert response.status_code == 302 and response["Location"] == f"/t/{team.slug}/reports/"
    export = Export.objects.get(team=team)
    page = client.get(response["Location"]).content.decode()
    assert f"Export {export.pk} is ready" in page
    download = f"/t/{team.slug}/reports/{export.pk}/download/"
    assert f'href="{download}"' in page and export.filename in page
    assert export.created_by.username in page and '<span class="status status-done">' in page
    file = client.get(download)
    assert file.status_code == 200 and file["Content-Type"] == "text/html; charset=utf-8"
    assert file["Content-Disposition"] == f'attachment; filename="{export.filename}"'
    assert b"<svg" in file.content and b"Session report: session" in file.content


def test_a_comparison_needs_two_different_sessions(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    session = journal_session(team, best={"gemm": 5.0})
    other = journal_session(team, mode="off", best={"gemm": 4.0})
    client = client_for(Role.VIEWER)
    form = {"kind": "comparison", "a": session.pk, "b": session.pk, "format": "json"}

    same = client.post(f"/t/{team.slug}/reports/new/", form)
    assert same.status_code == 400 and "Pick two different sessions." in same.content.decode()
    assert not Export.objects.exists()

    client.post(f"/t/{team.slug}/reports/new/", form | {"b": other.pk})
    made = json.loads(bytes(Export.objects.get().content))
    assert [s["session"]["id"] for s in made["sessions"]] == [session.pk, other.pk]


def test_another_teams_export_is_not_found(
    team: Team, other_team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    theirs = Export.objects.create(team=other_team, kind="knowledge", format="json",
                                   status="done", content=b"{}", filename="kb.json")  # fmt: skip
    queued = Export.objects.create(team=team, kind="knowledge", format="json")
    MembershipFactory(team=other_team, role=Role.ADMIN)
    client = client_for(Role.ADMIN)

    assert client.get(f"/t/{team.slug}/reports/{theirs.pk}/download/").status_code == 404
    assert client.get(f"/t/{other_team.slug}/reports/{theirs.pk}/download/").status_code == 404
    assert client.get(f"/t/{team.slug}/reports/{queued.pk}/download/").status_code == 404
    page = client.get(f"/t/{team.slug}/reports/").content.decode()
    assert "kb.json" not in page and f"#{queued.pk}" in page


def test_an_export_in_progress_shows_its_progress_and_htmx_polls_the_list(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    Export.objects.create(team=team, kind="knowledge", format="md", status="running",
                          progress=60, progress_text="writing 3 rules")  # fmt: skip
    client = client_for(Role.VIEWER)

    page = client.get(f"/t/{team.slug}/reports/").content.decode()
    part = client.get(f"/t/{team.slug}/reports/?part=exports", HTTP_HX_REQUEST="true")

    assert '<progress max="100" value="60"' in page and "writing 3 rules" in page
    assert 'hx-trigger="every 2s"' in page
    fragment = part.content.decode()
    assert fragment.lstrip().startswith('<div id="exports"') and "<html" not in fragment


def test_a_reviewer_imports_a_file_and_its_rules_wait_in_the_review_queue(
    team: Team, other_team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    rule_propose(team=other_team, source_key="case:1", evidence={"operators": ["gemm"]},
                 wording=Wording("Tile the k loop", "matmul-like loops"))  # fmt: skip
    exporter = MembershipFactory(team=other_team, role=Role.VIEWER).user
    exporting = Client()
    exporting.force_login(exporter)
    exporting.post(f"/t/{other_team.slug}/reports/new/", {"kind": "knowledge", "format": "json"})
    raw = bytes(Export.objects.get(team=other_team).content)
    client = client_for(Role.REVIEWER)

    response = client.post(f"/t/{team.slug}/reports/import/",
                           {"file": SimpleUploadedFile("kb.json", raw)})  # fmt: skip

    assert response.status_code == 302
    rule = Rule.objects.get(team=team)
    assert rule.status == "pending"
    queue = client.get(f"/t/{team.slug}/review/").content.decode()
    assert "Tile the k loop" in queue and f"imported from team {other_team.name}" in queue
    detail = client.get(f"/t/{team.slug}/review/{rule.pk}/").content.decode()
    origin = Rule.objects.get(team=other_team).pk
    assert (f"Imported from team {other_team.name} (<code>{other_team.slug}</code>): its rule "
            f"{origin}, pending there, version 1") in detail  # fmt: skip


def test_a_bad_import_file_is_shown_with_what_is_wrong_and_listed_as_failed(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    client = client_for(Role.ADMIN)
    bad = SimpleUploadedFile("notes.json", b'{"format": "kope-knowledge-base", "version": 7}')

    response = client.post(f"/t/{team.slug}/reports/import/", {"file": bad})

    page = response.content.decode()
    assert response.status_code == 400
    assert "notes.json: version: must be 1, got 7" in page
    assert '<span class="status status-failed">' in page and not Rule.objects.exists()


def test_the_import_form_is_shown_only_to_those_who_may_import(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    viewer_page = client_for(Role.VIEWER).get(f"/t/{team.slug}/reports/").content.decode()
    reviewer_page = client_for(Role.REVIEWER).get(f"/t/{team.slug}/reports/").content.decode()
    action = f'action="/t/{team.slug}/reports/import/"'
    assert action not in viewer_page and action in reviewer_page
    refused = client_for(Role.ENGINEER).post(
        f"/t/{team.slug}/reports/import/", {"file": SimpleUploadedFile("kb.json", b"{}")}
    )
    assert refused.status_code == 403


def test_a_large_export_the_broker_refuses_is_said_to_have_failed(
    transactional_db: None, team: Team, client_for: Callable[[Role | str], Client],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(services, "INLINE_ROWS", 0)
    monkeypatch.setattr(make_export, "delay", broker_down)
    session = journal_session(team, best={"gemm": 5.0})
    client = client_for(Role.ENGINEER)

    form = {"kind": "session", "session": session.pk, "format": "html"}
    response = client.post(f"/t/{team.slug}/reports/new/", form, follow=True)

    export = Export.objects.get(team=team)
    assert export.status == "failed" and not export.is_active
    page = response.content.decode()
    assert f"Export {export.pk} failed: the agent worker&#x27;s queue refused it" in page
    assert "hx-trigger" not in page  # nothing left to follow


def test_every_export_is_listed_older_ones_on_later_pages(
    team: Team, client_for: Callable[[Role | str], Client]
) -> None:
    """The list stopped at the newest 200: older exports and their files were out of reach."""
    Export.objects.bulk_create(Export(team=team, kind="knowledge", format="json", status="done",
                                      filename=f"kb-{n}.json") for n in range(205))  # fmt: skip
    oldest = Export.objects.order_by("pk").first()
    client = client_for(Role.VIEWER)

    first = client.get(f"/t/{team.slug}/reports/").content.decode()
    last = client.get(f"/t/{team.slug}/reports/?page=2").content.decode()

    assert 'rel="next" href="?page=2"' in first and "kb-0.json" not in first
    assert f"/reports/{oldest.pk}/download/" in last and "kb-0.json" in last
    assert "Exports 201 to 205 of 205" in last
