"""Reading a knowledge-base file: each problem is named with where it is. No database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apps.reports.knowledge import ImportFileError, imported_rules, parse_knowledge_file


def rule(status: str = "pending", **version: Any) -> dict[str, Any]:
    wording = {"number": 1, "statement": "Tile the k loop", "applies_when": "matmul-like",
               "not_when": "", "evidence": {"operators": ["gemm"]}} | version  # fmt: skip
    return {"id": 7, "source_key": "case:42", "status": status, "approved_version": None,
            "versions": [wording], "history": []}  # fmt: skip


def file_of(*rules: Any, **top: Any) -> bytes:
    data = {"format": "kope-knowledge-base", "version": 1, "exported_at": "2026-01-01",
            "team": {"slug": "origin", "name": "Origin"}, "rules": list(rules)} | top  # fmt: skip
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "the file is not JSON: Expecting property name enclosed in double quotes "
                       "at line 1, column 2"),
        (b"\xff\xfe", "the file is not UTF-8 text (byte 0)"),
        (b"[]", "the file: must be a JSON object"),
        (file_of(format="something-else"), "format: must be 'kope-knowledge-base'"),
        (file_of(version=2), "version: must be 1, got 2"),
        (file_of(team="origin"), "team: must be an object with slug and name"),
        (file_of(rules={}), "rules: must be a list"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_knowledge_base_export_says_why(raw: bytes, message: str) -> None:
    with pytest.raises(ImportFileError) as error:
        parse_knowledge_file(raw)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (rule(statement="  "), "rules[1].versions[0].statement: must not be empty"),
        (rule(applies_when=3), "rules[1].versions[0].applies_when: must be a string"),
        (rule(evidence=[]), "rules[1].versions[0].evidence: must be an object"),
        (rule(status="adored"), "rules[1].status: must be one of candidate, pending"),
        ({**rule(), "versions": []}, "rules[1].versions: must be a non-empty list"),
        ("a rule", "rules[1]: must be an object"),
        # no longer than a reviewer (or the model distilling a rule) may write one
        (rule(statement="x" * 4001), "rules[1].versions[0].statement: is 4001 characters; "
                                     "at most 4000"),
        (rule(applies_when="x" * 2001), "rules[1].versions[0].applies_when: is 2001 "
                                        "characters; at most 2000"),
        (rule(not_when="x" * 2001), "rules[1].versions[0].not_when: is 2001 characters; "
                                    "at most 2000"),
    ],
)  # fmt: skip
def test_a_bad_rule_is_named_by_its_place_in_the_file(bad: Any, message: str) -> None:
    data = parse_knowledge_file(file_of(rule(), bad))
    with pytest.raises(ImportFileError) as error:
        imported_rules(data)
    assert str(error.value).startswith(message)


def test_approved_and_pending_rules_are_imported_with_their_provenance_and_vetoed_ones_not() -> (
    None
):
    approved = rule("approved") | {"id": 8, "approved_version": 1}
    approved["versions"].append({"number": 2, "statement": "Unapproved rewording",
                                 "applies_when": "x", "evidence": {}})  # fmt: skip
    data = parse_knowledge_file(file_of(rule(), approved, rule("vetoed") | {"id": 9}))

    found = imported_rules(data)

    assert [r.source_key for r in found] == ["import:origin:7", "import:origin:8"]
    assert found[1].wording.statement == "Tile the k loop"  # the approved wording
    evidence = found[0].evidence
    assert evidence["provenance"] == "imported from team Origin"
    assert evidence["operators"] == ["gemm"] and evidence["imported_from"]["rule_id"] == 7
