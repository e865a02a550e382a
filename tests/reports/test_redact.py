"""Secrets in reports and export failures: a short password is a secret too, and the reason an
export failed, kept in its row and shown on the page and in the API, is redacted like a
report."""

from __future__ import annotations

import json

import pytest

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.models import Case
from apps.memory.rules import Wording, rule_propose
from apps.reports.collect import session_report
from apps.reports.knowledge import ImportFileError, knowledge_data, knowledge_markdown
from apps.reports.models import Export
from apps.reports.redact import without_secrets
from apps.reports.render import render
from apps.reports.services import export_fail, knowledge_import
from tests.factories import MembershipFactory
from tests.reports.sessions import journal_session

SHORT = "hunter2"  # a 7-character admin password


def test_a_secret_of_four_to_seven_characters_is_redacted_from_a_report(
    team: Team, settings
) -> None:
    settings.KOPE_ADMIN_PASSWORD = SHORT
    settings.ANTHROPIC_API_KEY = "kope"  # 4 characters: the shortest redacted
    session = journal_session(team, best={"gemm": 5.0})
    Case.objects.filter(session_id=session.pk, iteration=1).update(strategy=f"{SHORT} kope tile")

    text = json.dumps(session_report(session))

    assert SHORT not in text
    assert "[redacted] [redacted] tile" in text


def test_a_short_secret_inside_a_word_is_left_whole(settings) -> None:
    """The compose file's database password is "kope": every kernel includes kope_kernel.h."""
    settings.KOPE_ADMIN_PASSWORD = "kope"
    source = '#include "kope_kernel.h"\n// postgresql://kope:kope@db/x, kopek, akope'

    text = without_secrets(source)

    assert text == (
        '#include "kope_kernel.h"\n// postgresql://[redacted]:[redacted]@db/x, kopek, akope'
    )


def test_a_long_secret_is_redacted_even_inside_a_word(settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-0123456789"
    assert without_secrets("key=xsk-ant-0123456789y") == "key=x[redacted]y"


def test_a_secret_under_four_characters_is_left_as_it_would_mangle_ordinary_text(
    team: Team, settings
) -> None:
    settings.KOPE_ADMIN_PASSWORD = "ab1"
    session = journal_session(team, best={"gemm": 5.0})
    Case.objects.filter(session_id=session.pk, iteration=1).update(strategy="tile ab1")

    assert "tile ab1" in json.dumps(session_report(session))


def test_an_export_failure_reason_is_stored_and_shown_without_the_secret(
    team: Team, settings, client_for
) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-api03-PLANTED-IN-AN-ERROR-0123456789"
    user = MembershipFactory(team=team, role=Role.VIEWER).user
    export = Export.objects.create(team=team, kind="knowledge", format="md", created_by=user)

    export_fail(export.pk, f"RuntimeError: the API refused key {settings.ANTHROPIC_API_KEY}")

    export.refresh_from_db()
    assert export.status == "failed"
    assert export.error == "RuntimeError: the API refused key [redacted]"
    client = client_for(Role.VIEWER)
    page = client.get(f"/t/{team.slug}/reports/").content.decode()
    answer = client.get(f"/api/teams/{team.slug}/exports/{export.pk}").content.decode()
    for shown in (page, answer):
        assert "PLANTED" not in shown and "the API refused key [redacted]" in shown


def test_a_failed_imports_reason_is_stored_without_the_secret(team: Team, settings) -> None:
    settings.KOPE_ADMIN_PASSWORD = SHORT
    reviewer = MembershipFactory(team=team, role=Role.REVIEWER).user

    with pytest.raises(ImportFileError) as refused:
        knowledge_import(team=team, user=reviewer, filename=f"{SHORT}.json", raw=b"not json")

    error = Export.objects.get(team=team, kind="knowledge_import").error
    assert SHORT not in error and error.startswith("[redacted].json: the file is not JSON")
    assert refused.value.message == error  # the page and the API say the same


@pytest.mark.parametrize("password", ["case", "pass", "operator"])
def test_a_password_that_is_part_of_a_field_name_leaves_every_format_whole(
    team: Team, settings, password: str
) -> None:
    """The report's own field names ("cases", "pass_rate", "operators") stay: redacting the
    password inside them broke every renderer that reads them (a KeyError, the export failed)."""
    settings.KOPE_ADMIN_PASSWORD = password
    session = journal_session(team, best={"gemm": 5.0})
    Case.objects.filter(session_id=session.pk, iteration=1).update(strategy=f"tile {password}!")
    data = session_report(session)

    for fmt in ("json", "md", "csv", "html", "pdf"):
        assert render(data, fmt)
    assert data["sessions"][0]["summary"]["pass_rate"] == 1.0
    assert "tile [redacted]!" in json.dumps(data)


def test_a_password_inside_a_knowledge_files_field_names_leaves_the_file_importable(
    team: Team, settings
) -> None:
    settings.KOPE_ADMIN_PASSWORD = "rule"
    rule_propose(team=team, source_key="case:9", evidence={},
                 wording=Wording("Tile the k loop", "matmul nests"))  # fmt: skip

    data = knowledge_data(team)

    assert len(data["rules"]) == 1 and knowledge_markdown(data)
