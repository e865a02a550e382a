"""Secrets in reports and export failures: a short password is a secret too, and the reason an
export failed, kept in its row and shown on the page and in the API, is redacted like a
report."""

from __future__ import annotations

import json

from apps.accounts.models import Team
from apps.memory.models import Case
from apps.reports.collect import session_report
from tests.reports.sessions import journal_session

SHORT = "hunter2"  # a 7-character admin password


def test_a_secret_of_four_to_seven_characters_is_redacted_from_a_report(
    team: Team, settings
) -> None:
    settings.KOPE_ADMIN_PASSWORD = SHORT
    settings.ANTHROPIC_API_KEY = "kope"  # 4 characters: the shortest redacted
    session = journal_session(team, best={"gemm": 5.0})
    Case.objects.filter(session=session, iteration=1).update(strategy=f"{SHORT} kope tile")

    text = json.dumps(session_report(session))

    assert SHORT not in text and "kope" not in text
    assert "[redacted] [redacted] tile" in text


def test_a_secret_under_four_characters_is_left_as_it_would_mangle_ordinary_text(
    team: Team, settings
) -> None:
    settings.KOPE_ADMIN_PASSWORD = "ab1"
    session = journal_session(team, best={"gemm": 5.0})
    Case.objects.filter(session=session, iteration=1).update(strategy="tile ab1")

    assert "tile ab1" in json.dumps(session_report(session))
