"""Memory keys: "case:42" and "rule:7" name the row a vector, a context item or an adoption
stands for ("document:<slug>" names a document)."""

from __future__ import annotations


def case_key(case_id: int) -> str:
    return f"case:{case_id}"


def rule_key(rule_id: int) -> str:
    return f"rule:{rule_id}"


def rule_id_of(key: str) -> int:
    """The rule a key of hot memory names; every key there is a rule's."""
    rule_id = id_in_key(key, "rule")
    if rule_id is None:
        raise ValueError(f"{key!r} is not a rule's key (rule:N)")
    return rule_id


def id_in_key(key: str, kind: str) -> int | None:
    """The primary key a "kind:N" key names; None for a key of another kind or no number."""
    prefix, _, number = key.partition(":")
    return int(number) if prefix == kind and number.isdecimal() else None
