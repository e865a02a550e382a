"""A report's data laid out as titled tables of text, the one layout that the Markdown, HTML
and PDF renderers each draw in their own way. Pure functions over the data dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apps.benchmarks.kernels import fmt


@dataclass(frozen=True)
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass(frozen=True)
class Section:
    heading: str
    facts: list[tuple[str, str]]
    tables: list[Table] = field(default_factory=list)


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def one_line(text: str, limit: int = 0) -> str:
    line = " ".join(str(text).split())
    return line[: limit - 1] + "…" if limit and len(line) > limit else line


FIGURES = (
    ("operators (all configured ones)", "operators", str),
    ("pass rate (missing count as failures)", "pass_rate", percent),
    ("geomean speedup vs PyTorch reference", "geomean_speedup_vs_reference", times),
    ("geomean speedup vs naive start", "geomean_speedup_vs_naive", times),
    ("operators in the geometric means", "geomean_operators", str),
    ("fraction faster than the reference", "fraction_faster_than_reference", percent),
    ("median self-acceleration", "median_self_acceleration", times),
    ("rounds used", "rounds_used", str),
    ("mean round of the best kernel", "mean_rounds_to_best", lambda value: f"{value:.1f}"),
    ("cases (attempts)", "cases", str),
    ("tokens used", "tokens_used", str),
)


def figure_rows(summaries: list[dict[str, Any]]) -> list[list[str]]:
    return [[label, *(show(s.get(key)) if s.get(key) is not None else "-" for s in summaries)]
            for label, key, show in FIGURES]  # fmt: skip


def session_facts(s: dict[str, Any]) -> list[tuple[str, str]]:
    info, config = s["session"], s["config"]
    budgets, measurement = config.get("budgets", {}), config.get("measurement", {})
    suite = info.get("suite") or {}
    return [
        ("status", f"{info['status']}" + (f" ({info['status_reason']})"
                                          if info["status_reason"] else "")),
        ("suite", str(suite.get("name") or suite.get("slug") or "-")),
        ("target", info["target"]), ("policy", info["policy"] + (
            f" ({config['model']})" if config.get("model") else "")),
        ("memory", info["memory_mode"]),
        ("budgets", ", ".join(f"{k} {v}" for k, v in budgets.items()) or "-"),
        ("measurement", ", ".join(f"{k} {v}" for k, v in measurement.items()) or "-"),
        ("seed", str(config.get("seed", "-"))),
        ("code version", str(config.get("code_version") or "-")),
        ("created", f"{info['created_at']} by {info['created_by']}"),
        ("finished", str(info["finished_at"] or "-")),
    ]  # fmt: skip


def operator_table(s: dict[str, Any]) -> Table:
    rows = [[r["operator"], fmt(r["correct"]), fmt(r["start_ms"], 4), fmt(r["best_ms"], 4),
             fastest_text(r), times(r["speedup_vs_naive"]), times(r["speedup_vs_reference"]),
             fmt(r["beats_reference"]), str(r["rounds_used"]), str(r["tokens"]),
             one_line(r["stop_reason"])] for r in s["operators"]]  # fmt: skip
    headers = ["operator", "correct", "naive ms", "incumbent ms", "fastest correct ms",
               "x naive", "x PyTorch", "beats PyTorch", "rounds", "tokens",
               "stopped because"]  # fmt: skip
    return Table("Per operator (the incumbent beat its parent timed beside it; the fastest "
                 "correct case read fastest in its own evaluation)", headers, rows)  # fmt: skip


def fastest_text(row: dict[str, Any]) -> str:
    """The fastest correct case's latency, with its case where it is not the incumbent."""
    case_id = row.get("fastest_correct_case_id")
    if case_id is None or case_id == row["best_case_id"]:
        return fmt(row.get("fastest_correct_ms"), 4) if case_id is not None else "-"
    return f"{fmt(row['fastest_correct_ms'], 4)} (case {case_id})"


def rules_table(s: dict[str, Any]) -> Table:
    rows = [[f"rule {r['id']} v{r['version']}", r["status"], one_line(r["statement"]),
             one_line(r["applies_when"]), str(r["adopted_in_cases"]),
             str(r["hot_tier_iterations"])] for r in s["rules_used"]]  # fmt: skip
    headers = ["rule", "status", "statement", "applies when", "adopted in cases",
               "iterations in hot tier"]  # fmt: skip
    return Table("Rules used", headers, rows, note="" if rows else "No rule was used.")


def cases_table(s: dict[str, Any]) -> Table:
    rows = [[str(c["id"]), c["operator"], str(c["iteration"]), fmt(c["parent_id"]),
             one_line(c["strategy"]), c["outcome"], fmt(c["correct"]), fmt(c["latency_ms"], 4),
             times(c["speedup_vs_reference"]), times(c["speedup_vs_parent"])]
            for c in s["cases"]]  # fmt: skip
    headers = ["case", "operator", "iteration", "parent", "strategy", "outcome", "correct",
               "latency ms", "x PyTorch", "x parent"]  # fmt: skip
    return Table("Cases (every attempt and its verdict)", headers, rows)


def session_section(s: dict[str, Any], heading: str) -> Section:
    summary = Table("Summary", ["figure", "value"], figure_rows([s["summary"]]))
    return Section(heading, session_facts(s),
                   [summary, operator_table(s), rules_table(s), cases_table(s)])  # fmt: skip


def comparison_section(data: dict[str, Any]) -> Section:
    a, b = data["sessions"]
    name_a, name_b = (f"{label}: session {s['session']['id']} ({s['session']['memory_mode']})"
                      for label, s in (("A", a), ("B", b)))  # fmt: skip
    figures = Table("Side by side", ["figure", name_a, name_b],
                    figure_rows([a["summary"], b["summary"]]))  # fmt: skip
    rows = []
    for r in data["comparison"]["operators"]:
        ra, rb = r["a"] or {}, r["b"] or {}
        rows.append([r["operator"], fmt(ra.get("best_ms"), 4), fmt(rb.get("best_ms"), 4),
                     times(r["ratio_a_over_b"]), times(ra.get("speedup_vs_reference")),
                     times(rb.get("speedup_vs_reference")), fmt(ra.get("correct")),
                     fmt(rb.get("correct"))])  # fmt: skip
    per_operator = Table(
        "Per operator", ["operator", "best ms A", "best ms B", "A / B", "x PyTorch A",
                         "x PyTorch B", "correct A", "correct B"], rows,
        note="A / B is best latency in A over best latency in B: above 1, B is faster.",
    )  # fmt: skip
    effect = data["comparison"]["effect_of_b_over_a"]
    facts = [("A", name_a.partition(": ")[2]), ("B", name_b.partition(": ")[2]),
             ("effect of B over A (geomean of A / B)",
              f"{times(effect)} over {data['comparison']['paired']} operators")]  # fmt: skip
    return Section("Comparison", facts, [figures, per_operator])


def report_sections(data: dict[str, Any]) -> list[Section]:
    sessions = data["sessions"]
    if data["report"]["kind"] == "comparison":
        return [comparison_section(data),
                *(session_section(s, f"{label}: session {s['session']['id']}")
                  for label, s in zip(("A", "B"), sessions, strict=True))]  # fmt: skip
    return [session_section(s, f"Session {s['session']['id']}") for s in sessions]
