"""`manage.py bench kernels` on one operator: the sessions' figures, ratios timed side by side."""

from __future__ import annotations

import csv
import json
import logging
import math
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.core.management import CommandError, call_command

from apps.benchmarks.kernels import consistency, consistency_line, disagreement
from apps.benchmarks.sessions import tasks_run_here
from apps.devices.models import Evaluation
from apps.memory.keys import id_in_key
from apps.memory.models import Case, JournalEvent, MemoryVector, Rule
from apps.memory.tasks import embed_case
from apps.runs.candidates import candidate_of_case
from apps.runs.models import OptimizationSession
from tests.factories import store_every_builtin

# Any operator will do; gelu is among the cheapest to evaluate (relu's 64M-element timing case
# cost four times as much).
OPERATOR = "gelu"
SUMMARY_KEYS = {
    "pass_rate",
    "geomean_speedup_vs_naive",
    "geomean_speedup_vs_reference",
    "fraction_faster_than_reference",
    "median_self_acceleration",
    "rounds_used",
}


def test_the_kernels_benchmark_reports_both_memory_modes_from_the_sessions(
    db: None, tmp_path: Path
) -> None:
    store_every_builtin()
    out, progress = StringIO(), StringIO()

    call_command("bench", "kernels", "--operators", OPERATOR, "--rounds", "2", "--timed-calls",
                 "3", "--out", str(tmp_path), "--json", stdout=out, stderr=progress)  # fmt: skip

    report = json.loads(out.getvalue())
    assert set(report["memory_on"]) >= SUMMARY_KEYS and set(report["memory_off"]) >= SUMMARY_KEYS
    assert math.isfinite(report["memory_effect_default"]) and report["memory_effect_default"] > 0
    (row,) = report["operators"]
    assert row["operator"] == OPERATOR and row["rounds_used"] == 2
    finished = JournalEvent.objects.get(session_id=report["sessions"]["read_write"],
                                        kind="operator_finished").payload  # fmt: skip
    best = Case.objects.get(pk=finished["best_case_id"])
    assert row["best_ms"] == best.latency_ms and row["correct"] is True
    assert row["speedup_vs_reference"] == best.speedup_vs_reference
    assert row["speedup_vs_naive_as_recorded"] == finished["speedup_vs_start"]
    assert report["memory_on"]["rounds_used"] == 2 and report["memory_on"]["pass_rate"] == 1.0
    assert row["rounds_to_best"] == best.iteration == report["memory_on"]["mean_rounds_to_best"]
    # the incumbent after each round, as the session replaced it: the start's latency until
    # the round that made the best kernel, which holds to the end
    start_ms = finished["start_latency_ms"]
    assert row["best_ms_by_round"] == [start_ms if k < best.iteration else best.latency_ms
                                       for k in (1, 2)]  # fmt: skip
    by_round = report["memory_effect_default_by_round"]
    assert by_round[-1] == report["memory_effect_default_as_recorded"] and len(by_round) == 2
    rows = list(csv.DictReader(StringIO(Path(report["files"]["csv"]).read_text())))
    assert [r["mode"] for r in rows] == ["memory_on", "memory_off"]
    assert rows[0]["rounds_to_best"] == str(best.iteration)
    assert f"| {OPERATOR} |" in Path(report["files"]["markdown"]).read_text()
    shown = [line.split(" iteration ")[1].split()[0] for line in progress.getvalue().splitlines()
             if f"memory off: {OPERATOR} iteration" in line]  # fmt: skip
    assert shown == ["0", "1"], "each case is shown once, with its operator"
    # gelu's first move, -ffast-math, wins by far; the ratio of the best kernel over the start
    # that the report gives is measured once more with both in one process
    start = Case.objects.get(session_id=report["sessions"]["read_write"], iteration=0)
    assert best.pk != start.pk
    beside = Evaluation.objects.get(source=best.source,
                                    options__baseline_sha256=start.source.sha256)  # fmt: skip
    ratio = beside.verdict["timed"]["vs_baseline"]
    last_off = Case.objects.filter(session_id=report["sessions"]["off"]).latest("created_at")
    assert beside.finished_at is not None and beside.finished_at > last_off.created_at, (
        "timed afresh after both sessions, not the evaluation that made the best kernel"
    )
    assert row["speedup_vs_naive"] == ratio and ratio > 1.5
    assert report["memory_on"]["median_self_acceleration"] == ratio
    as_recorded = report["memory_on"]["as_recorded"]
    assert as_recorded["median_self_acceleration"] == finished["speedup_vs_start"]
    assert rows[0]["speedup_vs_naive"] == str(ratio)
    assert report["memory_effect_default"] == row["memory_ratio"] > 0
    off_finished = JournalEvent.objects.get(session_id=report["sessions"]["off"],
                                            kind="operator_finished").payload  # fmt: skip
    best_off = Case.objects.get(pk=off_finished["best_case_id"])
    same = candidate_of_case(best).kernel_key == candidate_of_case(best_off).kernel_key
    assert row["same_best_kernel"] is same
    assert report["operators_with_the_same_best_kernel"] == int(same)
    assert not same or row["memory_ratio"] == 1.0
    assert (f"the same kernel (source, flags, threads) for {int(same)} of 1 operators"
            in Path(report["files"]["markdown"]).read_text())  # fmt: skip
    assert "As the sessions recorded them" in Path(report["files"]["markdown"]).read_text()
    factor = row["side_by_side_disagreement"]
    assert factor is None if same else factor >= 1.0
    assert report["side_by_side_consistency"]["operators_checked"] == int(not same)
    assert "side-by-side consistency: " in Path(report["files"]["markdown"]).read_text()
    assert "stopped after round k (k: effect): 1: " in Path(report["files"]["markdown"]).read_text()
    # the host was probed before, between and after the sessions
    host = report["host_parallel_speedup"]
    probes = {"before", "after_memory_read_write", "after_memory_off", "after_side_by_side",
              "after_learning"}  # fmt: skip
    assert set(host) == probes | {"cores"} and all(host[p] > 0 for p in probes)
    assert "Host: a matrix product on" in Path(report["files"]["markdown"]).read_text()
    steal = report["host_steal_share"]
    assert set(steal) == {"memory_read_write", "memory_off", "side_by_side", "second_run",
                          "learning"}  # fmt: skip
    assert all(0.0 <= steal[phase] <= 1.0 for phase in steal)
    assert (
        "Steal: the share of this machine's CPU time the hypervisor gave"
        in Path(report["files"]["markdown"]).read_text()
    )


def test_tasks_sent_while_the_benchmark_runs_run_here_without_a_line_each(
    db: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    eager = current_app.conf.task_always_eager

    with tasks_run_here():
        assert embed_case.delay(-1).successful()  # no such case: it returns at once
    quiet = [r for r in caplog.records if r.name == "celery.app.trace"]
    embed_case.apply(args=(-1,))  # after the benchmark, Celery's own lines come back

    assert quiet == []
    assert [r.name for r in caplog.records].count("celery.app.trace") == 1
    assert current_app.conf.task_always_eager is eager


def test_a_run_in_a_named_team_starts_from_what_that_team_recorded(
    db: None, tmp_path: Path
) -> None:
    store_every_builtin()
    first = bench_json("--operators", OPERATOR, "--rounds", "2", "--out", str(tmp_path))
    recorded = Case.objects.filter(session_id__in=first["sessions"].values())
    assert first["team_cases_before"] == 0 and recorded.exists()
    for case_id in recorded.values_list("pk", flat=True):
        embed_case(case_id)  # queued after a commit, which this test's transaction never makes

    second = bench_json("--operators", OPERATOR, "--rounds", "2", "--out", str(tmp_path),
                        "--team", first["team"])  # fmt: skip

    assert second["team"] == first["team"] and second["team_cases_before"] == recorded.count()
    assembled = JournalEvent.objects.get(session_id=second["sessions"]["read_write"],
                                         kind="context_assembled")  # fmt: skip
    # what both earlier sessions made from the starting kernel comes back first, whatever its
    # similarity, and the policy makes again the kernel that paid there
    from_start = {f"case:{pk}" for pk in recorded.filter(iteration=1).values_list("pk", flat=True)}
    retrieved = [hit["key"] for hit in assembled.payload["retrieved"]]
    # memory on, off, and on again (the search-saved run) each made one from the start
    assert len(from_start) == 3 and set(retrieved[:3]) == from_start
    proposed = JournalEvent.objects.get(
        session_id=second["sessions"]["read_write"], kind="candidate_proposed",
        payload__iteration=1,
    )  # fmt: skip
    assert any("on this very kernel" in a["why"] and a["key"] in from_start
               for a in proposed.payload["adopted"])  # fmt: skip
    off = JournalEvent.objects.get(session_id=second["sessions"]["off"], kind="context_assembled")
    assert off.payload["retrieved"] == [], "memory off reads nothing, whatever the team knows"


def test_the_learning_figure_holds_each_family_out_of_its_own_memory(
    db: None, tmp_path: Path
) -> None:
    store_every_builtin()
    operators = {OPERATOR: "activation", "axpby": "elementwise"}

    report = bench_json("--operators", ",".join(operators), "--rounds", "2", "--out",
                        str(tmp_path))  # fmt: skip

    learning = report["learning"]
    assert report["memory_effect"] == learning["memory_effect"] > 0
    assert {row["operator"]: row["family"] for row in learning["operators"]} == operators
    off = OptimizationSession.objects.get(pk=learning["sessions"]["off"])
    held_out = OptimizationSession.objects.get(pk=learning["sessions"]["read_only_other_families"])
    assert off.team_id == held_out.team_id != OptimizationSession.objects.get(
        pk=report["sessions"]["read_write"]).team_id  # fmt: skip
    assert (off.config["offline_prior"], off.config["memory_mode"]) == ("blank", "off")
    assert (held_out.config["offline_prior"], held_out.config["memory_scope"]) == (
        "blank", "other-families")  # fmt: skip
    baseline_cases = Case.objects.filter(session_id=off.pk)
    assert learning["cases_stored_as_memory"] == baseline_cases.count() > 0
    assert MemoryVector.objects.filter(session_id=off.pk).count() == baseline_cases.count()
    recalled_any = False
    for event in JournalEvent.objects.filter(session_id=held_out.pk, kind="context_assembled"):
        family = operators[event.payload["operator"]]
        for key in (hit["key"] for hit in event.payload["retrieved"]):
            case = Case.objects.select_related("version__operator").get(pk=id_in_key(key, "case"))
            assert case.session_id == off.pk and case.version.operator.family != family
            recalled_any = True
    assert recalled_any, "each operator recalls the other family's cases"
    saved = report["search_saved"]
    for slug, rounds in saved["by_operator"].items():
        best = Case.objects.get(pk=JournalEvent.objects.get(
            session_id=report["sessions"]["read_write"], kind="operator_finished",
            payload__operator=slug).payload["best_case_id"])  # fmt: skip
        assert rounds["first_run"] == best.iteration >= 1 and 1 <= rounds["second_run"] <= 3
    assert report["rounds_saved_ratio"] == (
        saved["rounds_first_run"] / saved["rounds_second_run"] if saved["by_operator"] else None
    )
    rules = Rule.objects.filter(team__slug=report["team"])
    assert report["rule_candidates"]["proposed"] == rules.count()
    assert {r["rule"] for r in report["rule_candidates"]["rules"]} == set(
        rules.values_list("pk", flat=True))  # fmt: skip
    economy = report["token_economy"]
    assert economy["sessions"] == 1 and economy["active_vs_passive_token_ratio"] > 1
    assert economy["iterations"] == JournalEvent.objects.filter(
        session_id=report["sessions"]["read_write"], kind="context_assembled").count()  # fmt: skip
    markdown = Path(report["files"]["markdown"]).read_text()
    assert "memory effect, learning (geomean best latency off / on" in markdown
    assert "Prompt tokens, the default policy's read-write session: passive context" in markdown
    assert "Rule candidates after the default policy's read-write runs: " in markdown
    assert "search saved: the default policy's second run" in markdown


def test_three_side_by_side_ratios_that_disagree_are_reported_with_the_worst() -> None:
    gather_rows = {"on": 2.17, "off": 1.37, "memory": 1.0}  # as a suite run on a noisy host read
    cumsum = {"on": 2.13, "off": 1.91, "memory": 1.112}
    assert disagreement(gather_rows, same=False) == pytest.approx(2.17 / 1.37)
    assert disagreement({"on": 1.0, "off": 2.0, "memory": 0.5}, same=False) == pytest.approx(1.0)
    assert disagreement({"on": 1.0, "off": 2.0, "memory": 1.0}, same=False) == pytest.approx(2.0)
    assert disagreement(gather_rows, same=True) is None, "one kernel: no pair was timed"
    assert disagreement({**gather_rows, "memory": None}, same=False) is None

    factors = [disagreement(gather_rows, False), None, disagreement(cumsum, False)]
    summed = consistency(factors, ["gather_rows", "relu", "cumsum"])

    assert summed["operators_checked"] == 2 and summed["worst_operator"] == "gather_rows"
    assert summed["worst_disagreement"] == pytest.approx(2.17 / 1.37)
    assert summed["median_disagreement"] == pytest.approx((2.17 / 1.37 + 2.13 / 1.91 / 1.112) / 2)
    assert "on the 2 operators" in consistency_line(summed)
    assert "(worst: gather_rows, 1.58)" in consistency_line(summed)
    assert "not checked" in consistency_line(consistency([None], ["relu"]))


def test_a_team_that_does_not_exist_is_named_in_the_error(db: None) -> None:
    with pytest.raises(CommandError, match="--team no-such-team: no team has that slug"):
        bench_json("--operators", OPERATOR, "--team", "no-such-team")


def test_an_operator_that_is_not_built_in_is_named_with_the_option(db: None) -> None:
    with pytest.raises(CommandError, match=r"^--operators: not built-in operators: no_such_op$"):
        bench_json("--operators", f"{OPERATOR},no_such_op")


def test_an_operator_named_twice_is_measured_and_counted_once(db: None, tmp_path: Path) -> None:
    """Its session ran it once, but it had two rows, counted twice in the memory effect and in
    "the same kernel for 2 of 2 operators", beside summaries that counted it once."""
    store_every_builtin()
    report = bench_json("--operators", f"{OPERATOR},{OPERATOR}", "--rounds", "1", "--out",
                        str(tmp_path))  # fmt: skip
    assert [row["operator"] for row in report["operators"]] == [OPERATOR]
    assert report["operators_with_the_same_best_kernel"] <= 1
    assert report["token_economy"] is None, "one round assembles no context"


def bench_json(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("bench", "kernels", "--timed-calls", "3", "--json", *args, stdout=out,
                 stderr=StringIO())  # fmt: skip
    return json.loads(out.getvalue())
