"""A report of a real session (one operator, two rounds, evaluated in this process) holds the
numbers in the database, in every format; the PDF opens and its first page renders."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from apps.accounts.models import Team
from apps.memory.models import Case, JournalEvent
from apps.reports.collect import session_report
from apps.reports.render import render
from tests.reports.sessions import real_session

SECRET = "sk-ant-api03-REPORTS-TEST-KEY-0123456789abcdef"


def poppler() -> None:
    """pdftoppm and pdftotext (poppler-utils, `make browser`); skipped only where they are
    missing and cannot be installed (not root), as that target does."""
    if shutil.which("pdftoppm") and shutil.which("pdftotext"):
        return
    if os.geteuid() == 0:
        pytest.fail("poppler-utils is missing: run `make browser`")
    pytest.skip("poppler-utils is missing and this user cannot install it")


def pdf_text(path: Path, *pages: str) -> str:
    command = ["pdftotext", "-layout", *pages, str(path), "-"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def test_a_report_of_a_real_session_holds_the_numbers_in_the_database(
    team: Team, settings, tmp_path: Path
) -> None:
    settings.ANTHROPIC_API_KEY = SECRET  # a key is set, and no format may carry it
    session = real_session(team)
    cases = list(Case.objects.filter(session_id=session.pk).order_by("iteration"))
    finished = JournalEvent.objects.get(session_id=session.pk, kind="operator_finished").payload
    best = Case.objects.get(pk=finished["best_case_id"])
    data = session_report(session)
    files = {fmt: render(data, fmt) for fmt in ("json", "md", "csv", "html", "pdf")}

    everything = json.loads(files["json"])
    s = everything["sessions"][0]
    assert s["config"] == session.config and s["session"]["tokens_used"] == session.tokens_used
    assert [(c["id"], c["latency_ms"], c["outcome"], c["correct"]) for c in s["cases"]] == [
        (c.pk, c.latency_ms, c.outcome, c.correct) for c in cases
    ]
    replaced = JournalEvent.objects.filter(session_id=session.pk, kind="incumbent_replaced")
    assert {c["id"] for c in s["cases"] if c["new_incumbent"]} == {
        e.payload["case_id"] for e in replaced} >= {best.pk}  # fmt: skip
    row = s["operators"][0]
    assert row["operator"] == "relu" and row["best_case_id"] == best.pk
    assert row["best_ms"] == best.latency_ms == finished["best_latency_ms"]
    assert row["speedup_vs_reference"] == best.speedup_vs_reference
    assert row["speedup_vs_naive"] == pytest.approx(cases[0].latency_ms / best.latency_ms)
    summary = s["summary"]
    assert summary["pass_rate"] == 1.0 and summary["cases"] == len(cases) == 2
    assert summary["geomean_speedup_vs_reference"] == pytest.approx(best.speedup_vs_reference)
    assert summary["geomean_speedup_vs_naive"] == pytest.approx(row["speedup_vs_naive"])
    assert summary["fraction_faster_than_reference"] == float(best.speedup_vs_reference > 1)
    assert summary["tokens_used"] == session.tokens_used

    markdown = files["md"].decode()
    assert markdown.startswith(f"# Session report: session {session.pk}")
    assert f"| relu | yes | {cases[0].latency_ms:.4f} | {best.latency_ms:.4f} |" in markdown
    assert f"{best.speedup_vs_reference:.2f}x" in markdown

    rows = list(csv.DictReader(io.StringIO(files["csv"].decode())))
    assert [r["case_id"] for r in rows if r["row"] == "case"] == [str(c.pk) for c in cases]
    assert [float(r["latency_ms"]) for r in rows if r["row"] == "case"] == [
        c.latency_ms for c in cases
    ]
    assert [r["best_ms"] for r in rows if r["row"] == "operator"] == [str(best.latency_ms)]

    html = files["html"].decode()
    assert "<svg" in html and f"{best.latency_ms:.4f}" in html
    for external in ("<script", "<link", 'src="', "url(", "@import"):
        assert external not in html, f"the HTML report needs no {external}"

    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(files["pdf"])
    poppler()
    subprocess.run(["pdftoppm", "-png", "-r", "40", "-f", "1", "-l", "1", str(pdf),
                    str(tmp_path / "page")], check=True, timeout=60)  # fmt: skip
    image = next(tmp_path.glob("page*.png"))
    with Image.open(image) as page:
        darkest, lightest = page.convert("L").getextrema()
    assert darkest < 100 < lightest, "the first page rendered blank"
    first_page = pdf_text(pdf, "-f", "1", "-l", "1")
    assert f"Session report: session {session.pk}" in first_page
    assert f"{best.latency_ms:.4f}" in pdf_text(pdf)

    for fmt, content in files.items():
        text = pdf_text(pdf) if fmt == "pdf" else content.decode()
        assert SECRET not in text, f"the {fmt} report carries the API key"
