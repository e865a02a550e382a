"""The Operators, Suites and Imports pages and their API, as a team member sees them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.models import ImportRun, Operator
from apps.operators.services import suite_set
from tests.factories import TeamFactory, stored_builtin


@pytest.fixture
def operators(team: Team) -> None:
    relu = stored_builtin("relu")  # shared
    gemm = stored_builtin("gemm")  # shared
    stored_builtin("cumsum", team)  # the team's own
    suite_set(team=None, slug="pair", name="A pair", operators=[relu.operator, gemm.operator])


@pytest.fixture
def viewer(client_for: Callable[[Role | str], Client]) -> Client:
    return client_for(Role.VIEWER)


@pytest.fixture
def engineer(client_for: Callable[[Role | str], Client]) -> Client:
    return client_for(Role.ENGINEER)


@pytest.mark.usefixtures("operators")
def test_the_operator_list_filters_by_family_and_level(viewer: Client) -> None:
    page = viewer.get("/t/kernels/operators/").content.decode()
    assert "3 of 3 operators" in page and "ReLU" in page and "Cumulative sum" in page

    page = viewer.get("/t/kernels/operators/?family=matmul").content.decode()
    assert "1 of 3 operators" in page and "GEMM" in page and "ReLU" not in page

    page = viewer.get("/t/kernels/operators/?level=1").content.decode()
    assert "2 of 3 operators" in page and "GEMM" not in page


@pytest.mark.usefixtures("operators")
def test_the_operator_page_shows_description_cases_reference_and_starting_kernel(
    viewer: Client,
) -> None:
    page = viewer.get("/t/kernels/operators/gemm/").content.decode()
    assert "Matrix multiply (GEMM)" in page
    assert "C = A @ B" in page  # the description's math
    assert "tail" in page and "timed" in page  # cases, with the timing one marked
    assert "def reference(inputs, params):" in page
    assert "int kope_kernel(" in page and "cpu-c" in page
    assert "shared by every team" in page
    assert "Save as a new version" not in page  # shared, and a viewer


def test_another_teams_operator_is_not_found(viewer: Client) -> None:
    stored_builtin("cumsum", TeamFactory(slug="elsewhere"))
    assert viewer.get("/t/kernels/operators/cumsum/").status_code == 404
    assert viewer.get("/api/teams/kernels/operators/cumsum").status_code == 404


@pytest.mark.usefixtures("operators")
def test_an_engineer_edits_the_teams_operator_into_a_new_version(engineer: Client) -> None:
    form = {"name": "Prefix sum", "description": "y[i] = x[0] + ... + x[i]",
            "max_abs": "0.001", "max_rel": "0.001", "based_on": "1"}  # fmt: skip
    response = engineer.post("/t/kernels/operators/cumsum/edit/", form)
    assert response.status_code == 302 and response["Location"].endswith("?v=2")

    page = engineer.get(response["Location"]).content.decode()
    assert "Prefix sum" in page and "version 2" in page and "Saved as version 2." in page
    assert 'name="based_on" value="2"' in page
    old = engineer.get("/t/kernels/operators/cumsum/?v=1").content.decode()
    assert "Cumulative sum" in old and "newest is v2" in old
    assert "Save as a new version" not in old  # its values would undo version 2


@pytest.mark.usefixtures("operators")
def test_an_edit_from_a_page_older_than_the_newest_version_is_kept_and_not_saved(
    engineer: Client,
) -> None:
    first = {"name": "Prefix sum", "description": "by Ann", "max_abs": "0.001",
             "max_rel": "0.001", "based_on": "1"}  # fmt: skip
    assert engineer.post("/t/kernels/operators/cumsum/edit/", first).status_code == 302
    stale = {**first, "name": "Running total", "description": "by Bob"}

    response = engineer.post("/t/kernels/operators/cumsum/edit/", stale)

    assert response.status_code == 409
    page = response.content.decode()
    assert ("the edit was made to version 1 of cumsum, but the newest is version 2: look at its "
            "changes and edit that one; nothing was saved") in page  # fmt: skip
    assert "Running total" in page and "by Bob" in page  # the editor's changes, kept
    assert 'name="based_on" value="2"' in page  # saving again saves them over version 2
    assert Operator.objects.get(slug="cumsum").versions.count() == 2
    again = engineer.post("/t/kernels/operators/cumsum/edit/", {**stale, "based_on": "2"})
    assert again.status_code == 302 and again["Location"].endswith("?v=3")


@pytest.mark.usefixtures("operators")
def test_a_bad_edit_is_shown_again_with_the_reason(engineer: Client) -> None:
    form = {"name": "x", "description": "y", "max_abs": "-1", "max_rel": "0.001", "based_on": "1"}
    response = engineer.post("/t/kernels/operators/cumsum/edit/", form)
    assert response.status_code == 400
    assert "Ensure this value is greater than or equal to" in response.content.decode()


@pytest.mark.usefixtures("operators")
def test_the_suite_page_lists_operators_in_order(viewer: Client) -> None:
    page = viewer.get("/t/kernels/suites/pair/").content.decode()
    assert page.index("ReLU") < page.index("GEMM")
    assert "A pair" in viewer.get("/t/kernels/suites/").content.decode()


def test_an_import_outside_the_roots_is_refused_on_the_page(
    engineer: Client,
    settings,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    settings.KOPE_IMPORT_ROOTS = [tmp_path]
    response = engineer.post("/t/kernels/imports/new/", {"path": "/etc", "scale": "1"})
    assert response.status_code == 400
    assert "outside the import roots" in response.content.decode()
    assert not ImportRun.objects.exists()


def test_an_import_page_shows_a_progress_line(team: Team, viewer: Client) -> None:
    run = ImportRun.objects.create(team=team, path="/data/kb", format="kernelbench", total=4,
                                   done=1, report=[{"problem": "level1/1_ReLU.py",
                                   "outcome": "imported", "reason": "", "operator": "kb_l1_1_relu",
                                   "version": 1}])  # fmt: skip
    partial = viewer.get(f"/t/kernels/imports/{run.pk}/", headers={"HX-Request": "true"})
    text = partial.content.decode()
    assert "Importing: 1 of 4 problems done" in text and 'hx-trigger="every 1s"' in text
    assert "<html" not in text  # only the progress partial

    run.status, run.done = ImportRun.Status.DONE, 4
    run.save()
    text = viewer.get(f"/t/kernels/imports/{run.pk}/").content.decode()
    assert "Done: 1 imported, 0 unchanged" in text and "every 1s" not in text


@pytest.mark.usefixtures("operators")
def test_the_api_lists_and_gets_operators_and_suites(viewer: Client) -> None:
    listed = viewer.get("/api/teams/kernels/operators?family=activation").json()
    assert listed["count"] == 1 and listed["items"][0]["slug"] == "relu"
    assert listed["items"][0]["shared"] is True

    gemm = viewer.get("/api/teams/kernels/operators/gemm").json()
    assert gemm["versions"] == [1] and gemm["level"] == 3
    assert "cpu-c" in gemm["starting_kernels"]
    assert len(gemm["case_list"]) == gemm["cases"] >= 8

    suite = viewer.get("/api/teams/kernels/suites/pair").json()
    assert suite["operators"] == ["relu", "gemm"]
    assert viewer.get("/api/teams/kernels/operators/nope").json()["error"]["code"] == "not_found"


@pytest.mark.usefixtures("operators")
def test_the_api_edits_only_the_teams_own_operators(engineer: Client, viewer: Client) -> None:
    edit = engineer.patch("/api/teams/kernels/operators/cumsum", {"max_rel": 1e-4},
                          content_type="application/json")  # fmt: skip
    assert edit.status_code == 201 and edit.json()["version"] == 2
    again = engineer.patch("/api/teams/kernels/operators/cumsum", {"max_rel": 1e-4},
                           content_type="application/json")  # fmt: skip
    assert again.status_code == 200 and again.json()["version"] == 2

    shared = engineer.patch("/api/teams/kernels/operators/relu", {"max_rel": 1e-4},
                            content_type="application/json")  # fmt: skip
    assert shared.status_code == 400 and "shared by every team" in shared.json()["error"]["message"]
    bad = engineer.patch("/api/teams/kernels/operators/cumsum", {"max_rel": -1},
                         content_type="application/json")  # fmt: skip
    assert bad.status_code == 422
    denied = viewer.patch("/api/teams/kernels/operators/cumsum", {"max_rel": 1e-4},
                          content_type="application/json")  # fmt: skip
    assert denied.status_code == 403


@pytest.mark.usefixtures("operators")
def test_an_api_edit_based_on_an_older_version_is_a_conflict(engineer: Client) -> None:
    def edit(body: dict[str, object]) -> Any:
        return engineer.patch(
            "/api/teams/kernels/operators/cumsum", body, content_type="application/json"
        )

    assert edit({"max_rel": 1e-4, "based_on": 1}).status_code == 201
    stale = edit({"max_rel": 1e-5, "based_on": 1})
    assert stale.status_code == 409
    assert stale.json()["error"]["message"] == (
        "the edit was made to version 1 of cumsum, but the newest is version 2: look at its "
        "changes and edit that one; nothing was saved"
    )
    assert edit({"max_rel": 1e-5, "based_on": 2}).json()["version"] == 3
