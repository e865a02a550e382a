"""The forest and case pages: drawn on demand, filters that say what they hide, inert text."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.services import kernel_source_store
from apps.memory.journal import journal_append
from apps.runs.models import OptimizationSession
from tests.factories import stored_builtin

PLANTED = "<script>alert('planted')</script>"


def small_forest(team: Team) -> dict[str, int]:
    """start -> {fast (improved) -> faster (improved), broken (incorrect)}"""
    version = stored_builtin("gemm")
    session = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    ids: dict[str, int] = {}

    def record(name: str, iteration: int, parent: str | None, outcome: str, code: str,
               strategy: str) -> None:  # fmt: skip
        correct = outcome != "incorrect"
        event = journal_append(session_id=session.pk, kind="case_recorded", payload={
            "iteration": iteration, "version_id": version.pk, "target": "cpu-c",
            "strategy": strategy, "outcome": outcome, "correct": correct,
            "parent_case_id": ids[parent] if parent else None,
            "source_sha256": kernel_source_store(code).sha256,
            "latency_ms": 10.0 / (iteration + 1) if correct else None,
            "speedup_vs_reference": 0.1 * (iteration + 1) if correct else None})  # fmt: skip
        ids[name] = event.pk

    record("start", 0, None, "no_change", "int a;\nint b;\n", "starting kernel")
    record("fast", 1, "start", "improved", "int a;\nint c;\n", "interchange(loop=L0)")
    record("broken", 2, "start", "incorrect", f"/* {PLANTED} */\nint b;\n", PLANTED)
    record("faster", 3, "fast", "improved", "int a;\nint d;\n", "tile(loop=L0, size=32)")
    return ids


@pytest.fixture
def viewer(client_for: Callable[[Role], Client]) -> Client:
    return client_for(Role.VIEWER)


def test_the_forest_shows_roots_and_opens_only_what_the_link_opens(
    team: Team, viewer: Client
) -> None:
    ids = small_forest(team)
    closed = viewer.get(f"/t/{team.slug}/forest/?operator=gemm").content.decode()
    assert f'data-case="{ids["start"]}"' in closed and f'data-case="{ids["fast"]}"' not in closed
    assert "expand (2)" in closed

    opened = viewer.get(f"/t/{team.slug}/forest/?operator=gemm&open={ids['start']}")
    page = opened.content.decode()
    assert f'data-case="{ids["fast"]}"' in page and f'data-case="{ids["broken"]}"' in page
    assert f'data-case="{ids["faster"]}"' not in page  # its parent is still closed
    assert PLANTED not in page and "&lt;script&gt;" in page


def test_a_filter_says_how_many_nodes_it_hides_and_keeps_the_path_to_a_match(
    team: Team, viewer: Client
) -> None:
    ids = small_forest(team)
    url = f"/t/{team.slug}/forest/?operator=gemm&outcome=incorrect&open={ids['start']}"
    page = viewer.get(url).content.decode()

    assert "the filters hide 2" in page  # fast and faster; start stays as the path
    assert f'data-case="{ids["broken"]}"' in page and f'data-case="{ids["fast"]}"' not in page


def test_htmx_gets_one_nodes_children(team: Team, viewer: Client) -> None:
    ids = small_forest(team)
    part = viewer.get(f"/t/{team.slug}/forest/{ids['start']}/children/").content.decode()
    assert part.startswith('<ul role="group">') and "<html" not in part
    assert f'data-case="{ids["fast"]}"' in part and f'data-case="{ids["broken"]}"' in part


def test_a_case_page_shows_its_diff_path_children_and_escapes_agent_text(
    team: Team, viewer: Client
) -> None:
    ids = small_forest(team)
    page = viewer.get(f"/t/{team.slug}/cases/{ids['broken']}/").content.decode()

    assert '<span class="diff-del">-int a;</span>' in page
    assert '<span class="diff-add">+/* &lt;script&gt;' in page
    assert PLANTED not in page
    fast = viewer.get(f"/t/{team.slug}/cases/{ids['fast']}/").content.decode()
    assert f'href="/t/{team.slug}/cases/{ids["faster"]}/"' in fast  # its child
    assert f'href="/t/{team.slug}/cases/{ids["start"]}/"' in fast  # the path


def test_another_teams_case_is_not_found(team: Team, other_team: Team, viewer: Client) -> None:
    ids = small_forest(other_team)
    assert viewer.get(f"/t/{team.slug}/cases/{ids['start']}/").status_code == 404
    assert "No attempts yet" in viewer.get(f"/t/{team.slug}/forest/").content.decode()


def test_a_decision_never_redirects_off_site(
    team: Team, client_for: Callable[[Role], Client]
) -> None:
    from apps.memory.rules import Wording, rule_propose

    rule = rule_propose(team=team, source_key="case:9", evidence={},
                        wording=Wording("Tile the k loop", "matmul nests"))  # fmt: skip
    response = client_for(Role.REVIEWER).post(
        f"/t/{team.slug}/review/{rule.pk}/veto/",
        {"reason": "too vague", "next": "https://elsewhere.example/phish"},
    )
    assert response.status_code == 302 and response["Location"] == f"/t/{team.slug}/review/"


def test_a_path_opened_hundreds_of_levels_deep_renders_nested(team: Team, viewer: Client) -> None:
    version = stored_builtin("gemm")
    session = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    chain: list[int] = []
    for iteration in range(300):  # deeper than a recursive template can go
        chain.append(journal_append(session_id=session.pk, kind="case_recorded", payload={
            "iteration": iteration, "version_id": version.pk, "target": "cpu-c",
            "strategy": "unroll", "outcome": "no_change", "correct": True,
            "parent_case_id": chain[-1] if chain else None}).pk)  # fmt: skip

    url = f"/t/{team.slug}/forest/?operator=gemm&open={','.join(map(str, chain))}"
    page = viewer.get(url).content.decode()

    assert f'data-case="{chain[-1]}"' in page
    assert (
        page.count('<ul role="group">') == 299
        and page.count('<li role="treeitem"') == page.count("</li>") == 300
    )


def test_an_operator_tried_only_on_another_target_shows_its_forest_and_the_target_choice(
    team: Team, viewer: Client
) -> None:
    version = stored_builtin("gemm")
    session = OptimizationSession.objects.create(team=team, target="cuda", memory_mode="off")
    root = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": 0, "version_id": version.pk, "target": "cuda", "strategy": "naive grid",
        "outcome": "no_change", "correct": True})  # fmt: skip

    page = viewer.get(f"/t/{team.slug}/forest/?operator=gemm").content.decode()

    assert f'data-case="{root.pk}"' in page and "1 node(s) for <code>gemm</code> on cuda" in page
    assert '<option value="cuda" selected>cuda</option>' in page
    kept = viewer.get(f"/t/{team.slug}/forest/?operator=gemm&target=cpu-c").content.decode()
    assert f'data-case="{root.pk}"' in kept  # a target kept from another operator's forest


def test_a_teams_own_operator_of_a_shared_slug_leaves_the_shared_ones_attempts_in_its_forest(
    team: Team, viewer: Client
) -> None:
    session = OptimizationSession.objects.create(team=team, target="cpu-c", memory_mode="off")
    attempts = {}
    for name, version in (("shared", stored_builtin("gemm")),
                          ("own", stored_builtin("gemm", team=team))):  # fmt: skip
        attempts[name] = journal_append(session_id=session.pk, kind="case_recorded", payload={
            "iteration": len(attempts), "version_id": version.pk, "target": "cpu-c",
            "strategy": f"{name} start", "outcome": "no_change", "correct": True}).pk  # fmt: skip

    page = viewer.get(f"/t/{team.slug}/forest/?operator=gemm").content.decode()

    assert f'data-case="{attempts["own"]}"' in page
    assert f'data-case="{attempts["shared"]}"' in page  # where its case page's link leads


def test_a_case_whose_verdict_was_reused_names_the_case_that_measured_it(
    team: Team, other_team: Team, viewer: Client
) -> None:
    """A re-run's cases showed the first run's figures (every side-by-side ratio 1.00x) with
    nothing saying they were not measured again."""
    version = stored_builtin("gemm")

    def recorded(owner: Team) -> int:
        session = OptimizationSession.objects.create(team=owner, target="cpu-c")
        return journal_append(session_id=session.pk, kind="case_recorded", payload={
            "iteration": 0, "version_id": version.pk, "target": "cpu-c",
            "strategy": "starting kernel", "outcome": "no_change", "correct": True,
            "parent_case_id": None, "source_sha256": kernel_source_store("int a;\n").sha256,
            "latency_ms": 4.0, "speedup_vs_reference": 1.0,
            "feedback": {"summary": "correct", "evaluation_id": 77}}).pk  # fmt: skip

    theirs, first, again = recorded(other_team), recorded(team), recorded(team)

    page = viewer.get(f"/t/{team.slug}/cases/{again}/").content.decode()
    assert f'Reused from <a href="/t/{team.slug}/cases/{first}/">case #{first}</a>' in page
    assert (
        'id="verdict-reused"' not in viewer.get(f"/t/{team.slug}/cases/{first}/").content.decode()
    )
    assert f"case #{theirs}" not in page  # another team's case is never named
