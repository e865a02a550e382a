"""Cases over the API: pages of cases with filters, a forest subtree to a depth, a comparison,
and a profile's trace; another team's case is a 404 like a missing one."""

from __future__ import annotations

from collections.abc import Callable

from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, stored_builtin
from tests.memory.test_compare_pages import two_cases
from tests.memory.test_forest_pages import PLANTED, small_forest


def test_cases_come_in_pages_with_filters_and_their_code(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    ids = small_forest(team)
    client = client_for(Role.VIEWER)
    page = client.get(f"/api/teams/{team.slug}/cases?limit=2").json()
    assert page["count"] == 4 and [c["id"] for c in page["items"]] == [ids["start"], ids["fast"]]
    failed = client.get(f"/api/teams/{team.slug}/cases?outcome=incorrect").json()
    assert [c["id"] for c in failed["items"]] == [ids["broken"]]
    case = client.get(f"/api/teams/{team.slug}/cases/{ids['broken']}").json()
    assert case["strategy"] == PLANTED and case["code"].startswith(f"/* {PLANTED} */")
    assert case["parent"] == ids["start"] and case["operator"] == "gemm"
    bad = client.get(f"/api/teams/{team.slug}/cases?outcome=lost")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"


def test_a_subtree_stops_at_its_depth_and_says_how_many_children_wait(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    ids = small_forest(team)
    client = client_for(Role.VIEWER)
    url = f"/api/teams/{team.slug}/cases/{ids['start']}/subtree"
    shallow = client.get(f"{url}?depth=1").json()
    assert shallow["child_count"] == 2
    fast = next(c for c in shallow["children"] if c["id"] == ids["fast"])
    assert fast["child_count"] == 1 and fast["children"] == []
    deep = client.get(f"{url}?depth=5").json()
    fast = next(c for c in deep["children"] if c["id"] == ids["fast"])
    assert [c["id"] for c in fast["children"]] == [ids["faster"]]
    too_deep = client.get(f"{url}?depth=21")
    assert too_deep.status_code == 400 and "depth must be between 0 and 20" in too_deep.text


def test_two_cases_compare_with_a_diff_and_measurement_deltas(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    a, b = two_cases(team, stored_builtin("vector_add"), evaluate=False)
    client = client_for(Role.VIEWER)
    body = client.get(f"/api/teams/{team.slug}/compare?a={a}&b={b}").json()
    assert body["same_code"] is False and "+#pragma omp simd" in body["diff"]
    latency = next(m for m in body["measurements"] if m["label"] == "latency (ms)")
    assert (latency["a"], latency["b"], latency["verdict"]) == (1.0, 2.0, "worse")
    blind = client.get(f"/api/teams/{team.slug}/compare?a={a}&b={b}&ignore_whitespace=true")
    assert "-        out[i]" in body["diff"] and "-        out[i]" not in blind.json()["diff"]
    assert body["a"] == {"case": a, "samples_ms": [], "reference_median_ms": None,
                         "profile": None, "profiling": False}  # fmt: skip


def test_another_teams_case_is_not_found(team: Team, other_team: Team) -> None:
    ids = small_forest(team)
    outsider = Client()
    outsider.force_login(MembershipFactory(team=other_team, role=Role.ADMIN).user)
    for path in (f"cases/{ids['start']}", f"cases/{ids['start']}/subtree",
                 f"compare?a={ids['start']}&b={ids['fast']}"):  # fmt: skip
        response = outsider.get(f"/api/teams/{other_team.slug}/{path}")
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"


def test_a_page_far_past_the_end_is_empty_and_a_limit_over_1000_is_refused(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    small_forest(team)
    client = client_for(Role.VIEWER)
    url = f"/api/teams/{team.slug}/cases"
    far = client.get(f"{url}?limit=1000&offset=32589158477190044731")
    assert far.status_code == 200 and far.json() == {"items": [], "count": 4}
    huge = client.get(f"{url}?limit=32589158477190044731")
    assert huge.status_code == 422 and huge.json()["error"]["code"] == "validation_error"
