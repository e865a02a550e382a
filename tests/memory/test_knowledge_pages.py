"""The knowledge base: cases, rules and documents found by meaning under filters, with where
each came from; another team's memory never shows; agent-written text stays inert."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.coldstart import DOCUMENTS
from apps.memory.coldstart.vectors import cold_start_vectors_stale, cold_start_vectors_store
from apps.memory.journal import journal_append
from apps.memory.models import MemoryVector, Rule
from apps.memory.retrieval import Query, retrieve
from apps.memory.rules import Wording, rule_approve, rule_edit, rule_propose
from apps.memory.tasks import embed_case, embed_rule
from apps.runs.models import OptimizationSession
from tests.factories import MembershipFactory, stored_builtin

PLANTED = "<script>alert('planted')</script>"
TILING = "tile the k loop by 64 so the B panel stays in L2 cache while computing C"
LOOP_ORDER = "Accumulate into the output row in i-p-j loop order"


def record(team: Team, slug: str, iteration: int, strategy: str, outcome: str) -> int:
    """A case recorded through the journal, then embedded as the agent worker would."""
    version = stored_builtin(slug)
    session = OptimizationSession.objects.filter(team=team).first()
    if session is None:
        session = OptimizationSession.objects.create(team=team, target="cpu-c")
    event = journal_append(session_id=session.pk, kind="case_recorded", payload={
        "iteration": iteration, "version_id": version.pk, "target": "cpu-c",
        "strategy": strategy, "outcome": outcome, "correct": outcome != "incorrect",
        "speedup_vs_reference": 1.7 if outcome == "improved" else None})  # fmt: skip
    embed_case(event.pk)
    return event.pk


def propose(team: Team, source: str, statement: str, applies: str = "three-deep matmul nests"
            ) -> Rule:  # fmt: skip
    evidence = {"operators": ["gemm", "batched_matmul", "matmul_bias_relu"]}
    rule = rule_propose(team=team, source_key=source, wording=Wording(statement, applies),
                        evidence=evidence)  # fmt: skip
    embed_rule(rule.pk)
    return rule


@pytest.fixture
def memory(team: Team) -> dict[str, Any]:
    tiled = record(team, "gemm", 1, TILING, "improved")
    broken = record(team, "relu", 1, f"vectorise with AVX-512 {PLANTED}", "incorrect")
    rule = propose(team, f"case:{tiled}", f"{LOOP_ORDER} {PLANTED}")
    cold_start_vectors_store()
    return {"tiled": tiled, "broken": broken, "rule": rule}


@pytest.fixture
def viewer(client_for: Callable[[Role], Client]) -> Client:
    return client_for(Role.VIEWER)


def keys_on(page: str) -> list[str]:
    return [part.split('"', 1)[0] for part in page.split('data-key="')[1:]]


def search(client: Client, team: Team, **params: str) -> str:
    response = client.get(f"/t/{team.slug}/knowledge/", params)
    assert response.status_code == 200
    return response.content.decode()


def test_a_search_finds_a_case_by_meaning_with_its_provenance(
    team: Team, memory: dict[str, Any], viewer: Client
) -> None:
    page = search(viewer, team, q="cache blocking for matrix multiplication", kind="case")

    assert keys_on(page)[0] == f"case:{memory['tiled']}"
    assert all(key.startswith("case:") for key in keys_on(page))
    assert f'href="/t/{team.slug}/cases/{memory["tiled"]}/"' in page
    session = OptimizationSession.objects.get(team=team)
    assert f'href="/t/{team.slug}/sessions/{session.pk}/"' in page  # where it came from
    assert "iteration 1 · gemm on cpu-c" in page


def test_a_search_finds_a_rule_by_meaning_with_who_approved_it(
    team: Team, memory: dict[str, Any], viewer: Client
) -> None:
    rule = memory["rule"]
    reviewer = MembershipFactory(team=team, role=Role.REVIEWER).user
    rule_approve(rule=rule, user=reviewer, version_number=1)

    page = search(viewer, team, q="which loop order for matmul nests", kind="rule",
                  status="approved")  # fmt: skip

    assert keys_on(page) == [f"rule:{rule.pk}"]
    assert f'href="/t/{team.slug}/review/{rule.pk}/"' in page
    assert f"Approved v1 by {reviewer.username}" in page
    assert f'href="/t/{team.slug}/cases/{memory["tiled"]}/"' in page  # distilled from
    assert "No hits" in search(viewer, team, q="which loop order for matmul nests",
                               status="vetoed")  # fmt: skip


def test_a_search_finds_a_document_by_meaning_and_its_page_names_the_file(
    team: Team, memory: dict[str, Any], viewer: Client
) -> None:
    page = search(viewer, team, q="the output has NaN where elements were never written",
                  kind="document")  # fmt: skip

    assert keys_on(page)[0] == "doc:cpu-c:debugging"
    assert "apps/memory/coldstart/cpu-c/debugging.md" in page
    document = viewer.get(f"/t/{team.slug}/knowledge/documents/doc:cpu-c:debugging/")
    assert document.status_code == 200
    assert "apps/memory/coldstart/cpu-c/debugging.md" in document.content.decode()
    assert "Reading the verdict" in document.content.decode()  # the whole text, not a summary


def test_filters_narrow_by_kind_outcome_and_operator(
    team: Team, memory: dict[str, Any], viewer: Client
) -> None:
    failed = search(viewer, team, outcome="incorrect")
    assert keys_on(failed) == [f"case:{memory['broken']}"]
    gemm = set(keys_on(search(viewer, team, operator="gemm")))
    assert f"case:{memory['tiled']}" in gemm and f"case:{memory['broken']}" not in gemm
    assert f"rule:{memory['rule'].pk}" in gemm  # a rule carries its experience's operator
    documents = keys_on(search(viewer, team, kind="document", target="cpu-c"))
    assert sorted(documents) == ["doc:cpu-c:cheatsheet", "doc:cpu-c:debugging",
                                 "doc:cpu-c:examples"]  # fmt: skip


def test_an_empty_query_lists_the_newest_items_and_a_search_without_hits_says_so(
    team: Team, memory: dict[str, Any], viewer: Client
) -> None:
    newest = keys_on(search(viewer, team))
    assert {f"case:{memory['tiled']}", f"case:{memory['broken']}",
            f"rule:{memory['rule'].pk}", "doc:cpu-c:cheatsheet"} <= set(newest)  # fmt: skip

    page = search(viewer, team, q="zebra migration across the savanna")
    assert keys_on(page) == [] and "No hits" in page


def test_another_teams_memory_never_appears_and_its_pages_are_not_found(
    team: Team, other_team: Team, memory: dict[str, Any], viewer: Client
) -> None:
    theirs = record(other_team, "gemm", 2, TILING, "improved")
    their_rule = propose(other_team, f"case:{theirs}", LOOP_ORDER)
    MemoryVector.objects.create(kind="document", key="doc:cpu-c:their-notes", team=other_team,
                                text="# Their notes\ntile the k loop", target="cpu-c")  # fmt: skip

    for params in ({"q": TILING}, {"q": LOOP_ORDER}, {}, {"operator": "gemm"}):
        keys = keys_on(search(viewer, team, **params))
        assert f"case:{theirs}" not in keys and f"rule:{their_rule.pk}" not in keys
        assert "doc:cpu-c:their-notes" not in keys
    assert viewer.get(f"/t/{team.slug}/review/{their_rule.pk}/").status_code == 404
    notes = f"/t/{team.slug}/knowledge/documents/doc:cpu-c:their-notes/"
    assert viewer.get(notes).status_code == 404
    assert viewer.get(f"/t/{team.slug}/knowledge/documents/doc:nowhere/").status_code == 404


def test_agent_written_text_is_escaped(team: Team, memory: dict[str, Any], viewer: Client) -> None:
    for params in ({}, {"q": "vectorise with AVX-512"}, {"q": LOOP_ORDER}):
        page = search(viewer, team, **params)
        assert PLANTED not in page
        assert "&lt;script&gt;alert(&#x27;planted&#x27;)&lt;/script&gt;" in page


def test_htmx_gets_only_the_results(team: Team, memory: dict[str, Any], viewer: Client) -> None:
    part = viewer.get(f"/t/{team.slug}/knowledge/", {"q": TILING}, headers={"HX-Request": "true"})
    html = part.content.decode()
    assert html.strip().startswith('<section id="results"') and "<html" not in html
    assert f'data-key="case:{memory["tiled"]}"' in html


def test_a_rules_vector_follows_its_wording_after_commit(
    team: Team,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        wording = Wording("Unroll the inner loop by 4", "short rows")
        rule = rule_propose(team=team, source_key="case:1", evidence={}, wording=wording)
    vector = MemoryVector.objects.get(key=f"rule:{rule.pk}")
    assert vector.kind == "rule" and vector.team == team and vector.embedding is not None
    assert vector.text.startswith("Unroll the inner loop by 4\nApplies when: short rows")

    reviewer = MembershipFactory(team=team, role=Role.REVIEWER).user
    with django_capture_on_commit_callbacks(execute=True):
        rule_edit(rule=rule, user=reviewer, wording=Wording("Unroll by 8", "rows of 64 or more"))
    vector.refresh_from_db()
    assert vector.text.startswith("Unroll by 8\nApplies when: rows of 64 or more")


def test_an_agent_retrieves_a_rule_only_while_it_is_approved(
    team: Team, memory: dict[str, Any]
) -> None:
    rule = memory["rule"]
    query = Query(text=LOOP_ORDER, team_id=team.pk, target="cpu-c", kinds=("rule",))
    assert retrieve(query) == []  # pending: searchable by people, not fed to agents

    rule_approve(rule=rule, user=MembershipFactory(team=team, role=Role.REVIEWER).user,
                 version_number=1)  # fmt: skip
    assert [hit.key for hit in retrieve(query)] == [f"rule:{rule.pk}"]


def test_cold_start_documents_are_embedded_again_only_when_their_text_changed(db: None) -> None:
    assert cold_start_vectors_stale()
    cold_start_vectors_store()
    assert not cold_start_vectors_stale()
    marker = [1.0] + [0.0] * 383
    MemoryVector.objects.filter(key__in=["doc:cpu-c:cheatsheet", "doc:cpu-c:examples"]).update(
        embedding=marker
    )
    MemoryVector.objects.filter(key="doc:cpu-c:examples").update(text="an older text")
    assert cold_start_vectors_stale()

    cold_start_vectors_store()

    vectors = {v.key: v for v in MemoryVector.objects.filter(kind="document", team=None)}
    assert sorted(vectors) == sorted(f"doc:{t}:{n}" for t, names in DOCUMENTS.items()
                                     for n in names)  # fmt: skip
    assert list(vectors["doc:cpu-c:cheatsheet"].embedding) == marker  # same text: left alone
    assert vectors["doc:cpu-c:examples"].text.startswith("# cpu-c example kernels")
    assert list(vectors["doc:cpu-c:examples"].embedding) != marker  # changed: embedded again
    assert not cold_start_vectors_stale()


def test_the_api_searches_the_same_memory_with_provenance_and_filters(
    team: Team, memory: dict[str, Any], client_for: Callable[[Role], Client]
) -> None:
    client = client_for(Role.VIEWER)
    url = f"/api/teams/{team.slug}/knowledge"
    found = client.get(url, {"q": "keep the B panel in L2 by blocking the k loop"}).json()
    first = found["items"][0]
    assert first["key"] == f"case:{memory['tiled']}" and first["outcome"] == "improved"
    assert first["similarity"] > 0.25 and first["session"] is not None
    rules = client.get(url, {"q": "loop order", "kind": "rule", "status": "pending"}).json()
    assert [h["key"] for h in rules["items"]] == [f"rule:{memory['rule'].pk}"]
    assert rules["items"][0]["source_case"] == memory["tiled"]
    documents = client.get(url, {"kind": "document", "target": "cpu-c", "limit": 2}).json()
    assert documents["count"] >= 3 and len(documents["items"]) == 2
    bad = client.get(url, {"kind": "recipe"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"
