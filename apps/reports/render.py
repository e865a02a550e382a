"""A report's data as a file: JSON (everything), Markdown, CSV, self-contained HTML and PDF."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from apps.reports.markdown import md_text
from apps.reports.pdf import render_pdf
from apps.reports.svg import bar_chart, latency_chart
from apps.reports.tables import Section, Table, report_sections

CONTENT_TYPES = {
    "json": "application/json",
    "md": "text/markdown; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "pdf": "application/pdf",
}


def render_json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, indent=2, ensure_ascii=False).encode()


# --- Markdown ----------------------------------------------------------------------------------


def md_table(table: Table) -> list[str]:
    lines = [f"### {md_text(table.title)}", ""]
    if table.rows:
        lines.append("| " + " | ".join(md_text(h) for h in table.headers) + " |")
        lines.append("|" + "---|" * len(table.headers))
        lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in table.rows]
        lines.append("")
    if table.note:
        lines += [table.note, ""]
    return lines


def md_section(section: Section) -> list[str]:
    lines = [f"## {md_text(section.heading)}", ""]
    lines += [f"- **{name}**: {md_text(value)}" for name, value in section.facts]
    lines.append("")
    for table in section.tables:
        lines += md_table(table)
    return lines


def render_markdown(data: dict[str, Any]) -> bytes:
    meta = data["report"]
    lines = [f"# {md_text(meta['title'])}", "",
             f"Generated {meta['generated_at']} by KOPE Workbench.", ""]  # fmt: skip
    for section in report_sections(data):
        lines += md_section(section)
    return "\n".join(lines).encode()


# --- CSV ---------------------------------------------------------------------------------------

CSV_COLUMNS = [
    "row", "session", "memory_mode", "operator", "case_id", "iteration", "parent_id", "strategy",
    "outcome", "correct", "latency_ms", "speedup_vs_reference", "speedup_vs_parent", "finished",
    "start_ms", "best_ms", "speedup_vs_naive", "beats_reference", "rounds_used", "rounds_to_best",
    "best_case_id", "fastest_correct_ms", "fastest_correct_case_id", "tokens", "stop_reason",
]  # fmt: skip


def render_csv(data: dict[str, Any]) -> bytes:
    """One table: a row per operator ("operator") and per case ("case") of every session."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for s in data["sessions"]:
        common = {"session": s["session"]["id"], "memory_mode": s["session"]["memory_mode"]}
        for r in s["operators"]:
            writer.writerow(inert({**r, **common, "row": "operator"}))
        for c in s["cases"]:
            writer.writerow(inert({**c, **common, "row": "case", "case_id": c["id"]}))
    return out.getvalue().encode()


# A spreadsheet opening the CSV runs a cell that starts with one of these as a formula
# (=HYPERLINK(...) sends data away): agent-written text must stay text (OWASP's advice).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert(row: dict[str, Any]) -> dict[str, Any]:
    """The row with every text cell that a spreadsheet would read as a formula quoted by a
    leading apostrophe, which spreadsheets show as text and do not display."""
    return {key: f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS)
            else value for key, value in row.items()}  # fmt: skip


# --- HTML --------------------------------------------------------------------------------------


def session_charts(s: dict[str, Any]) -> list[str]:
    ops = s["operators"]
    names = [r["operator"] for r in ops]
    charts = [bar_chart(
        f"Session {s['session']['id']}: best kernel per operator", names,
        [("x PyTorch reference", [r["speedup_vs_reference"] for r in ops]),
         ("x naive start", [r["speedup_vs_naive"] for r in ops])],
    )]  # fmt: skip
    for name in names[:40]:  # past that the page is a wall of charts; the tables have them all
        points = [(c["iteration"], c["latency_ms"], c["correct"], c["new_incumbent"])
                  for c in s["cases"] if c["operator"] == name]  # fmt: skip
        charts.append(latency_chart(f"{name}: latency per attempt (ms)", points))
    return charts


def comparison_charts(data: dict[str, Any]) -> list[str]:
    rows = data["comparison"]["operators"]
    return [bar_chart(
        "Best latency, A / B (above 1: B is faster)", [r["operator"] for r in rows],
        [("A / B", [r["ratio_a_over_b"] for r in rows])],
    )]  # fmt: skip


def render_html(data: dict[str, Any]) -> bytes:
    sections = report_sections(data)
    charts: list[list[str]] = []
    if data["report"]["kind"] == "comparison":
        charts.append(comparison_charts(data))
    charts += [session_charts(s) for s in data["sessions"]]
    # svg.py escapes every text it draws, so the charts are safe markup
    drawn = [(section, [mark_safe(c) for c in chart])  # noqa: S308
             for section, chart in zip(sections, charts, strict=True)]  # fmt: skip
    context = {"meta": data["report"], "sections": drawn}
    return render_to_string("reports/report.html", context).encode()


def render(data: dict[str, Any], fmt: str) -> bytes:
    renderers = {"json": render_json, "md": render_markdown, "csv": render_csv,
                 "html": render_html, "pdf": render_pdf}  # fmt: skip
    return renderers[fmt](data)
