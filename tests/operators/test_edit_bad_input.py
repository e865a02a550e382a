"""Bad input to an operator edit over the API: whatever the JSON holds, the answer is the
edited operator or a 4xx with a reason, and a refused edit stores no version."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.models import OperatorVersion, StartingKernel
from apps.operators.spec import CaseSpec
from tests.factories import small_builtin

URL = "/api/teams/kernels/operators/cumsum_small"
FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def engineer(team: Team, client_for: Callable[[Role | str], Client]) -> Client:
    small_builtin("cumsum", [CaseSpec("one", {"rows": 1, "cols": 3})], team)
    return client_for(Role.ENGINEER)


def stored() -> tuple[int, int]:
    return OperatorVersion.objects.count(), StartingKernel.objects.count()


def patch(client: Client, body: dict[str, Any]) -> Any:
    # json.dumps writes Infinity and lone surrogates as they come, as a careless client would.
    return client.patch(URL, json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_abs": float("inf")}, "tolerances must be positive and finite"),
        ({"name": "Prefix\x00sum"}, "body.name holds a NUL character, which cannot be stored"),
        ({"starting_kernels": {"cpu-c": "int x; \ud800"}},
         "the cpu-c holds a NUL character or is not valid Unicode text"),
        ({"starting_kernels": {"c" * 40: "int x;"}}, "no target 'cccccccccccccccccccccccccc"),
        ({"starting_kernels": {"cpu-c": "x" * 200_001}},
         "the cpu-c starting kernel is 200001 characters; the limit is 200000"),
        ({"starting_kernels": {"cpu-c": "int x;\x00"}},
         "body.starting_kernels.cpu-c holds a NUL character"),
    ],
)  # fmt: skip
def test_an_edit_that_cannot_be_stored_is_a_400_with_the_reason(
    engineer: Client, body: dict[str, Any], message: str
) -> None:
    before = stored()
    response = patch(engineer, body)
    assert response.status_code == 400
    assert (
        response.json()["error"]["message"].startswith(message)
        or message in (response.json()["error"]["message"])
    )
    assert stored() == before


EDITS = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=30),
        "description": st.text(max_size=60),
        "max_abs": st.floats(allow_nan=False) | st.integers(-5, 5),
        "starting_kernels": st.dictionaries(
            st.sampled_from(["cpu-c", "cuda", "triton", "", "x" * 40]),
            st.text(max_size=30),
            max_size=2,
        ),
    },
)


@FUZZ
@given(EDITS)
def test_any_edit_is_stored_or_refused_with_a_4xx_and_nothing_stored(
    engineer: Client, body: dict[str, Any]
) -> None:
    before = stored()
    response = patch(engineer, body)
    assert response.status_code in (200, 201, 400, 422), response.content
    if response.status_code >= 400:
        assert response.json()["error"]["message"] and stored() == before
