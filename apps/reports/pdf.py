"""A report as PDF, drawn with fpdf2 (pure Python: no system libraries, works in any worker).

The built-in PDF fonts cover Latin-1 only; other characters (in agent-written strategies)
print as "?" rather than failing the export.
"""

from __future__ import annotations

import io
from typing import Any

from fpdf import FPDF
from fpdf.fonts import FontFace

from apps.reports.svg import bar_chart
from apps.reports.tables import Section, Table, report_sections

CELL_LIMIT = 70  # characters per cell; the JSON and CSV exports carry the full text
WIDE = 8  # tables with more columns than this use the smaller font


def latin1(text: str, limit: int = CELL_LIMIT) -> str:
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text.encode("latin-1", "replace").decode("latin-1")


class ReportPDF(FPDF):
    def __init__(self, title: str) -> None:
        super().__init__(orientation="landscape", format="A4")
        self.report_title = latin1(title, 200)
        self.set_title(self.report_title)
        self.set_creator("KOPE Workbench")
        self.set_auto_page_break(auto=True, margin=12)
        self.alias_nb_pages()

    def footer(self) -> None:
        self.set_y(-10)
        self.set_font("Helvetica", size=7)
        self.cell(0, 5, f"{self.report_title} - page {self.page_no()}/{{nb}}", align="C")


def draw_table(pdf: ReportPDF, table: Table) -> None:
    pdf.set_font("Helvetica", "B", 11)
    pdf.cell(0, 7, latin1(table.title), new_x="LMARGIN", new_y="NEXT")
    if table.rows:
        pdf.set_font("Helvetica", size=6.5 if len(table.headers) > WIDE else 8)
        heading = FontFace(emphasis="BOLD", fill_color=(235, 235, 235))
        with pdf.table(headings_style=heading, line_height=4, padding=1) as grid:
            for row in [table.headers, *table.rows]:
                line = grid.row()
                for cell in row:
                    line.cell(latin1(cell))
    if table.note:
        pdf.set_font("Helvetica", "I", 8)
        pdf.multi_cell(0, 4, latin1(table.note, 500), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(3)


def draw_section(pdf: ReportPDF, section: Section, chart: str | None) -> None:
    pdf.set_font("Helvetica", "B", 13)
    pdf.cell(0, 8, latin1(section.heading), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=8)
    for name, value in section.facts:
        pdf.multi_cell(0, 4, latin1(f"{name}: {value}", 300), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)
    if chart:
        pdf.image(io.BytesIO(chart.encode()), w=180)
        pdf.ln(2)
    for table in section.tables:
        draw_table(pdf, table)


def summary_chart(data: dict[str, Any], index: int) -> str | None:
    """The per-operator speedups of the session a section shows (none for a comparison)."""
    kind = data["report"]["kind"]
    if kind == "comparison":
        index -= 1
    if index < 0 or not data["sessions"][index]["operators"]:
        return None
    rows = data["sessions"][index]["operators"][:25]
    return bar_chart("Best kernel per operator", [r["operator"] for r in rows],
                     [("x PyTorch reference", [r["speedup_vs_reference"] for r in rows]),
                      ("x naive start", [r["speedup_vs_naive"] for r in rows])])  # fmt: skip


def render_pdf(data: dict[str, Any]) -> bytes:
    meta = data["report"]
    pdf = ReportPDF(meta["title"])
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 18)
    pdf.multi_cell(0, 10, pdf.report_title, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=9)
    pdf.cell(0, 6, latin1(f"Generated {meta['generated_at']} by KOPE Workbench."),
             new_x="LMARGIN", new_y="NEXT")  # fmt: skip
    pdf.ln(3)
    for i, section in enumerate(report_sections(data)):
        draw_section(pdf, section, summary_chart(data, i))
    return bytes(pdf.output())
