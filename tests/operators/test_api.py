"""Uploading starting kernels with an operator edit over the API: each goes to the target it
names, and only a target's own kernel changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.models import OperatorVersion, StartingKernel
from tests.factories import stored_builtin

URL = "/api/teams/kernels/operators/relu"


@pytest.fixture
def engineer(team: Team, client_for: Callable[[Role | str], Client]) -> Client:
    stored_builtin("relu", team)  # the team's own, with cpu-c and triton starting kernels
    return client_for(Role.ENGINEER)


def patch(client: Client, body: dict[str, Any]) -> Any:
    return client.patch(URL, body, content_type="application/json")


@pytest.mark.parametrize("target", ["name", "description"])
def test_a_starting_kernel_for_a_target_named_like_a_field_is_refused(
    engineer: Client, target: str
) -> None:
    response = patch(engineer, {"starting_kernels": {target: "int x;"}})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        f"no target {target!r} (targets: cpu-c, triton, cuda)"
    )
    assert OperatorVersion.objects.count() == 1 and StartingKernel.objects.count() == 2


def test_uploading_one_targets_starting_kernel_keeps_the_other_targets(engineer: Client) -> None:
    before = patch(engineer, {}).json()["starting_kernels"]

    uploaded = patch(engineer, {"starting_kernels": {"cpu-c": "int kope_kernel(void);\n"}})

    assert uploaded.status_code == 201
    assert uploaded.json()["starting_kernels"] == {
        "cpu-c": "int kope_kernel(void);\n", "triton": before["triton"]}  # fmt: skip


def test_a_null_starting_kernel_removes_that_targets_only(engineer: Client) -> None:
    before = patch(engineer, {}).json()["starting_kernels"]

    removed = patch(engineer, {"starting_kernels": {"triton": None}})

    assert removed.status_code == 201
    assert removed.json()["starting_kernels"] == {"cpu-c": before["cpu-c"]}
    assert patch(engineer, {"starting_kernels": {"triton": None}}).status_code == 200  # no change


@pytest.mark.parametrize("source", ["", " \n\t"])
def test_an_empty_starting_kernel_is_refused_as_a_session_refuses_one(
    engineer: Client, source: str
) -> None:
    """A session would have started from it (and failed to compile) instead of writing one."""
    response = patch(engineer, {"starting_kernels": {"cpu-c": source}})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "the cpu-c starting kernel is empty; null removes a target's starting kernel"
    )
    assert OperatorVersion.objects.count() == 1 and StartingKernel.objects.count() == 2


def test_an_edit_based_on_a_version_that_does_not_exist_is_a_400_saying_so(
    engineer: Client,
) -> None:
    """It was a 409 telling the client to look at the changes of a version made since."""
    response = patch(engineer, {"name": "Rectifier", "based_on": 7})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "relu has no version 7 (the newest is version 1); nothing was saved"
    )
    assert OperatorVersion.objects.count() == 1


def test_a_misspelt_field_is_a_422_naming_it_not_an_edit_that_changed_nothing(
    engineer: Client,
) -> None:
    response = patch(engineer, {"maxabs": 0.01})

    assert response.status_code == 422
    [detail] = response.json()["error"]["details"]
    assert detail["loc"][-1] == "maxabs" and detail["type"] == "extra_forbidden"
    assert OperatorVersion.objects.count() == 1
