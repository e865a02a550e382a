"""Measuring a case's kernel again from its page: a new evaluation under the verdict's
settings, timed beside the parent kernel, while the stored verdict and the case's figures stay
as they were; one measurement at a time; only those who may run kernels ask."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.evaluator import EvalSettings
from apps.devices.models import Evaluation
from apps.devices.services import evaluation_execute, evaluation_request, kernel_source_store
from apps.memory.models import Case
from apps.runs.models import OptimizationSession
from tests.memory.test_compare_pages import (
    NAIVE,
    OPTIONS,
    VECTORIZED,
    recorded_case,
    small_vector_add,
)


@pytest.fixture
def engineer(client_for: Callable[[Role], Client]) -> Client:
    return client_for(Role.ENGINEER)


@pytest.fixture
def child(team: Team) -> Case:
    """A measured case whose verdict timed it beside its parent kernel, as a session times it."""
    small_add = small_vector_add()
    session = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    parent = recorded_case(session, small_add, 0, None, NAIVE, "starting kernel")
    options = replace(OPTIONS, baseline_sha256=kernel_source_store(NAIVE).sha256)
    evaluation, _ = evaluation_request(version=small_add, source_text=VECTORIZED,
                                       options=options, team=team)  # fmt: skip
    evaluation = evaluation_execute(evaluation.pk, max_attempts=1)
    return Case.objects.get(pk=recorded_case(session, small_add, 1, parent, VECTORIZED,
                                             "vectorize", evaluation))  # fmt: skip


def case_page(client: Client, case: Case, part: str = "") -> str:
    response = client.get(f"/t/{case.session.team.slug}/cases/{case.pk}/{part}")
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def measure_again(client: Client, case: Case) -> int:
    return client.post(f"/t/{case.session.team.slug}/cases/{case.pk}/measure-again/").status_code


def test_measuring_again_times_the_kernel_anew_and_keeps_the_verdict(
    child: Case, engineer: Client
) -> None:
    first = Evaluation.objects.get(pk=child.feedback["evaluation_id"])
    verdict, latency = first.verdict, child.latency_ms
    assert "Measure again</button>" in case_page(engineer, child)

    assert measure_again(engineer, child) == 302
    assert measure_again(engineer, child) == 302  # a second click while it waits: the same one
    again = Evaluation.objects.exclude(pk=first.pk).get(source_id=child.source_id)
    assert again.options["measurement"] == 1 and again.status == Evaluation.Status.QUEUED
    assert {k: v for k, v in again.options.items() if k != "measurement"} == first.options
    waiting = case_page(engineer, child)
    assert "Measuring again on a device worker" in waiting and 'hx-trigger="every 2s"' in waiting
    assert "Measure again</button>" not in waiting

    evaluation_execute(again.pk, max_attempts=1)  # what a device worker does with it
    shown = case_page(engineer, child, "?part=measurements")
    row = shown.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    timed = Evaluation.objects.get(pk=again.pk).verdict["timed"]
    assert f"{timed['candidate']['median_ms']:.3f} ms" in row
    assert f"{timed['vs_baseline']:.2f}x" in row  # beside its parent, measured now
    assert "every 2s" not in shown and "Measure again</button>" in shown
    first.refresh_from_db()
    child.refresh_from_db()
    assert first.verdict == verdict and child.latency_ms == latency

    assert measure_again(engineer, child) == 302
    numbers = Evaluation.objects.filter(source_id=child.source_id, options__measurement__gte=1)
    assert sorted(e.options["measurement"] for e in numbers) == [1, 2]


def test_only_a_timed_case_is_measured_again_and_only_by_those_who_run_kernels(
    child: Case, engineer: Client, client_for: Callable[[Role], Client]
) -> None:
    viewer = client_for(Role.VIEWER)
    assert "Measure again</button>" not in case_page(viewer, child)
    assert measure_again(viewer, child) == 403
    never_timed = child.parent
    assert never_timed is not None and "Measure again</button>" not in case_page(
        engineer, never_timed
    )
    assert measure_again(engineer, never_timed) == 409
    assert not Evaluation.objects.filter(options__measurement__gte=1).exists()


def test_the_api_measures_again_and_lists_the_measurements(child: Case, engineer: Client) -> None:
    path = f"/api/teams/{child.session.team.slug}/cases/{child.pk}/measurements"
    assert engineer.get(path).json() == []
    asked = engineer.post(path)
    assert asked.status_code == 202, asked.content
    assert asked.json()["number"] == 1 and asked.json()["status"] == "queued"
    evaluation_execute(asked.json()["evaluation"], max_attempts=1)
    [measured] = engineer.get(path).json()
    assert measured["status"] == "done" and measured["median_ms"] > 0
    assert measured["vs_parent"] > 0
    never_timed = f"/api/teams/{child.session.team.slug}/cases/{child.parent_id}/measurements"
    refused = engineer.post(never_timed)
    assert refused.status_code == 409 and "never timed" in refused.json()["error"]["message"]


def test_another_teams_measurement_of_the_same_kernel_does_not_hide_this_teams(
    child: Case, engineer: Client, other_team: Team
) -> None:
    """Evaluations are shared by key: a number another team took is not ours to reuse."""
    first = Evaluation.objects.get(pk=child.feedback["evaluation_id"])
    theirs = replace(EvalSettings.from_json(first.options), measurement=1)
    evaluation_request(version=child.version, source_text=VECTORIZED, options=theirs,
                       team=other_team)  # fmt: skip

    assert measure_again(engineer, child) == 302
    ours = Evaluation.objects.get(team=child.session.team, options__measurement__gte=1)
    assert ours.options["measurement"] == 2
    assert "<td>#2</td>" in case_page(engineer, child)
