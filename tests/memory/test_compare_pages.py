"""The compare page: two real evaluated cases side by side, their diff in both views, the
measurement deltas, a profile made on request and downloaded as Chrome Trace JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.services import evaluation_execute, evaluation_request, kernel_source_store
from apps.memory.compare import measure_text
from apps.memory.journal import journal_append
from apps.operators.builtin_suite import BUILTIN_DIR
from apps.operators.models import OperatorVersion
from apps.operators.spec import CaseSpec
from apps.runs.models import OptimizationSession
from tests.devices.test_diagnostics import needs_valgrind
from tests.factories import MembershipFactory, small_builtin

PLANTED = "<script>alert('planted')</script>"
NAIVE = (BUILTIN_DIR / "vector_add" / "naive.c").read_text()
# The same loop, reindented (a whitespace-only change) and with a pragma and a planted comment.
VECTORIZED = NAIVE.replace(
    "    for (int64_t i", f"  /* {PLANTED} */\n#pragma omp simd\n    for (int64_t i"
)
VECTORIZED = VECTORIZED.replace("        out[i] = a[i] + b[i];", "      out[i] = a[i] + b[i];")
OPTIONS = EvalSettings(seeds=1, warmup=1, repeats=7)


def small_vector_add() -> OperatorVersion:
    cases = [CaseSpec("seven", {"n": 7}), CaseSpec("timing", {"n": 65536}, timing=True)]
    return small_builtin("vector_add", cases)


@pytest.fixture
def small_add(db: None) -> OperatorVersion:
    return small_vector_add()


def recorded_case(session: OptimizationSession, version: OperatorVersion, iteration: int,
                  parent: int | None, code: str, strategy: str,
                  evaluation: Evaluation | None = None) -> int:  # fmt: skip
    timed = (evaluation.verdict or {}).get("timed") if evaluation else None
    event = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": iteration, "version_id": version.pk, "target": "cpu-c",
        "strategy": strategy, "outcome": "improved" if parent else "no_change", "correct": True,
        "parent_case_id": parent, "source_sha256": kernel_source_store(code).sha256,
        "latency_ms": timed["candidate"]["median_ms"] if timed else 1.0 + iteration,
        "speedup_vs_reference": timed["speedup"] if timed else 0.5,
        "feedback": {"summary": "correct",
                     "evaluation_id": evaluation.pk if evaluation else None}})  # fmt: skip
    return int(event.pk)


def evaluated(team: Team, version: OperatorVersion, code: str) -> Evaluation:
    """`code` evaluated for real, in this process's sandbox, as a device worker would."""
    evaluation, _ = evaluation_request(version=version, source_text=code, options=OPTIONS,
                                       team=team)  # fmt: skip
    return evaluation_execute(evaluation.pk, max_attempts=1)


def two_cases(team: Team, version: OperatorVersion, *, evaluate: bool) -> tuple[int, int]:
    session = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    first_eval = evaluated(team, version, NAIVE) if evaluate else None
    second_eval = evaluated(team, version, VECTORIZED) if evaluate else None
    first = recorded_case(session, version, 0, None, NAIVE, "starting kernel", first_eval)
    second = recorded_case(session, version, 1, first, VECTORIZED, PLANTED, second_eval)
    return first, second


@pytest.fixture
def pair(team: Team, small_add: OperatorVersion) -> tuple[int, int]:
    """Two recorded cases (not evaluated: for what the code alone decides)."""
    return two_cases(team, small_add, evaluate=False)


@pytest.fixture
def measured_pair(team: Team, small_add: OperatorVersion) -> tuple[int, int]:
    return two_cases(team, small_add, evaluate=True)


@pytest.fixture
def engineer(client_for: Callable[[Role], Client]) -> Client:
    return client_for(Role.ENGINEER)


def page(client: Client, team: Team, query: str) -> str:
    response = client.get(f"/t/{team.slug}/compare/?{query}")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def diff_payload(html: str) -> Any:
    start = html.index('<script id="diff-text" type="application/json">') + len(
        '<script id="diff-text" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def test_the_split_and_unified_diffs_show_each_line_once_and_escape_agent_text(
    team: Team, pair: tuple[int, int], engineer: Client
) -> None:
    a, b = pair
    split = page(engineer, team, f"a={a}&b={b}")
    assert 'class="diff-table split"' in split and "<strong>Split</strong>" in split
    assert PLANTED not in split and "&lt;script&gt;alert(&#x27;planted&#x27;)" in split
    # the comment and the pragma are new; the reindented line faces its old self
    assert split.count('class="diff-add"') == 2 and split.count('class="diff-change"') == 1
    unified = page(engineer, team, f"a={a}&b={b}&view=unified")
    assert 'class="diff-table unified"' in unified
    assert unified.count('class="diff-del"') == 1 and unified.count('class="diff-add"') == 3
    # diff2html gets the same diff; json_script escapes "<" so the script element stays closed
    assert len(added_lines(diff_payload(unified))) == 3


def added_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line.startswith("+") and line[:3] != "+++"]


def test_hiding_whitespace_changes_keeps_only_the_real_change(
    team: Team, pair: tuple[int, int], engineer: Client
) -> None:
    a, b = pair
    html = page(engineer, team, f"a={a}&b={b}&view=unified&ws=ignore")
    assert html.count('class="diff-del"') == 0 and html.count('class="diff-add"') == 2
    assert "Show whitespace changes" in html
    assert added_lines(diff_payload(html))[1] == "+#pragma omp simd"


def admin_of(team: Team) -> Client:
    client = Client()
    client.force_login(MembershipFactory(team=team, role=Role.ADMIN).user)
    return client


def test_a_missing_or_foreign_case_is_not_found_and_no_pair_asks_for_one(
    team: Team, other_team: Team, pair: tuple[int, int], engineer: Client
) -> None:
    a, _ = pair
    assert "Compare two cases" in page(engineer, team, f"a={a}")
    assert engineer.get(f"/t/{team.slug}/compare/?a={a}&b=999999").status_code == 404
    outsider = admin_of(other_team)
    assert outsider.get(f"/t/{other_team.slug}/compare/?a={a}&b={a}").status_code == 404


@needs_valgrind
def test_measured_cases_show_deltas_and_samples_and_get_profiles_on_request(
    team: Team, other_team: Team, measured_pair: tuple[int, int], engineer: Client,
    client_for: Callable[[Role], Client],
) -> None:  # fmt: skip
    a, b = measured_pair
    html = page(engineer, team, f"a={a}&b={b}")
    assert "latency (ms)" in html and "speedup vs PyTorch eager" in html
    assert re.search(r'class="delta delta-(better|worse|same)">[+-]?\d+%', html)
    start = html.index('<script id="timeline-data" type="application/json">')
    data = json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])
    assert len(data["a"]["samples_ms"]) == len(data["b"]["samples_ms"]) == OPTIONS.repeats
    assert data["a"]["reference_median_ms"] > 0

    viewer = client_for(Role.VIEWER)
    assert "with cachegrind" not in page(viewer, team, f"a={a}&b={b}")
    assert viewer.post(f"/t/{team.slug}/compare/profile/", {"a": a, "b": b}).status_code == 403

    response = engineer.post(f"/t/{team.slug}/compare/profile/", {"a": a, "b": b})
    assert response.status_code == 302 and f"a={a}" in response["Location"]
    queued = Evaluation.objects.filter(team=team, options__profile=True)
    assert queued.count() == 2 and {e.options["repeats"] for e in queued} == {OPTIONS.repeats}
    assert "Profiling on a device worker (queued)" in page(engineer, team, f"a={a}&b={b}")
    for evaluation in queued:  # what a device worker does with them
        evaluation_execute(evaluation.pk, max_attempts=1)

    html = page(engineer, team, f"a={a}&b={b}&part=profiles")
    assert "Costliest kernel lines" in html and "out[i] = a[i] + b[i];" in html
    measured = page(engineer, team, f"a={a}&b={b}")
    assert "kernel D1 miss rate" in measured
    instructions = measured.split('<th scope="row">kernel instructions</th>', 1)[1]
    assert re.match(r"<td>\d{1,3}(,\d{3})+</td><td>\d{1,3}(,\d{3})+</td>", instructions)
    trace_path = re.findall(r'href="([^"]*/trace\.json)"', html)[0]
    download = engineer.get(trace_path)
    assert download["Content-Disposition"].startswith("attachment;")
    trace = json.loads(download.content)
    assert any(e["ph"] == "X" for e in trace["traceEvents"])  # the timed calls
    assert any(e["ph"] == "C" for e in trace["traceEvents"])  # the cachegrind counters
    outsider_path = trace_path.replace(f"/t/{team.slug}/", f"/t/{other_team.slug}/")
    assert admin_of(other_team).get(outsider_path).status_code == 404

    profile_path = trace_path.removesuffix("trace.json")  # its page: calls and costs drawn
    assert f'href="{profile_path}"' in html
    profile = engineer.get(profile_path).content.decode()
    assert f"The {OPTIONS.repeats} timed calls, in order" in profile
    functions = profile.split('class="compact function-costs"', 1)[1]
    assert re.search(r"<code>kope_kernel</code></td><td>\d{1,3}(,\d{3})+</td>", functions)
    assert "other (" in functions and "out[i] = a[i] + b[i];" in profile
    assert admin_of(other_team).get(outsider_path.removesuffix("trace.json")).status_code == 404


@needs_valgrind
def test_the_same_code_under_other_flags_gets_its_own_profile(
    team: Team, small_add: OperatorVersion, engineer: Client
) -> None:
    session = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    plain = evaluated(team, small_add, NAIVE)
    unrolled_options = replace(OPTIONS, extra_flags=("-funroll-loops",))
    unrolled, _ = evaluation_request(version=small_add, source_text=NAIVE,
                                     options=unrolled_options, team=team)  # fmt: skip
    unrolled = evaluation_execute(unrolled.pk, max_attempts=1)
    a = recorded_case(session, small_add, 0, None, NAIVE, "starting kernel", plain)
    b = recorded_case(session, small_add, 1, a, NAIVE, "flags(set=unroll)", unrolled)

    engineer.post(f"/t/{team.slug}/compare/profile/", {"a": a, "b": b})
    queued = Evaluation.objects.filter(team=team, options__profile=True)
    assert sorted(e.options["extra_flags"] for e in queued) == [[], ["-funroll-loops"]]
    for evaluation in queued:
        evaluation_execute(evaluation.pk, max_attempts=1)

    html = page(engineer, team, f"a={a}&b={b}&part=profiles")
    traces = re.findall(rf'href="/t/{team.slug}/profiles/(\d+)/trace.json"', html)
    flags = [Evaluation.objects.get(profiles__pk=pk).options["extra_flags"] for pk in traces]
    assert flags == [[], ["-funroll-loops"]]  # A's profile and B's, each of its own binary
    # Each says what it was built with: the timed build's flags, valgrind's ISA in place of
    # the native one.
    built = re.findall(
        r'class="profile-build">Built with <code>([^<]*)</code>: ([^<]*)\.</p>', html
    )
    assert len(built) == 2 and all("-march=x86-64-v3 -g" in f for f, _ in built)
    assert "-funroll-loops" not in built[0][0] and "-funroll-loops" in built[1][0]
    assert all(d.startswith("as timed, ") and "valgrind cannot run AVX-512" in d for _, d in built)


def test_a_measure_only_one_side_has_reads_as_a_dash_on_the_other(
    team: Team, small_add: OperatorVersion, engineer: Client
) -> None:
    session = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    timed = evaluated(team, small_add, NAIVE)
    first = recorded_case(session, small_add, 0, None, NAIVE, "starting kernel", timed)
    second = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 1, "version_id": small_add.pk, "target": "cpu-c", "strategy": "wrong",
        "outcome": "incorrect", "correct": False, "parent_case_id": first,
        "source_sha256": kernel_source_store(VECTORIZED).sha256, "latency_ms": None,
        "speedup_vs_reference": None, "feedback": {"summary": "incorrect"}}).pk  # fmt: skip

    html = page(engineer, team, f"a={first}&b={second}")

    start = html.index('<table class="compact measurements">')
    table = html[start : html.index("</table>", start)]
    assert "<td></td>" not in table
    assert "<td>-</td>" in table


@pytest.mark.parametrize(
    ("value", "text"),
    [(218210335, "218,210,335"), (218210335.0, "218,210,335"), (0.0123456, "0.01235"),
     (7.869, "7.869"), (2.0, "2"), (None, "-"), ("n/a", "-"), (True, "-")],
)  # fmt: skip
def test_a_measure_reads_as_a_count_or_to_four_significant_digits(value: object, text: str) -> None:
    """Counts printed as 218210335.0000 (floatformat:4 on every measure)."""
    assert measure_text(value) == text
