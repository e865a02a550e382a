"""The knowledge base as a file to share between teams: every rule (approved, vetoed,
candidates, retired) with its versions, evidence and review history; and the import of such a
file into another team's review queue as pending candidates.

The file format (JSON, `format` "kope-knowledge-base", `version` 1):

    {"format": "kope-knowledge-base", "version": 1, "exported_at": "...",
     "team": {"slug": "...", "name": "..."},
     "rules": [{"id": 7, "source_key": "case:42", "status": "approved",
                "approved_version": 1, "frequency": 0.3,
                "versions": [{"number": 1, "statement": "...", "applies_when": "...",
                              "not_when": "...", "evidence": {...}, "tokens": 31}],
                "history": [{"from": "", "to": "pending", "version": 1, "by": "...",
                             "comment": "...", "at": "..."}]}]}
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from apps.accounts.models import Team
from apps.core.errors import DomainError
from apps.memory.models import Rule
from apps.memory.rules import MAX_CONDITION_CHARS, MAX_STATEMENT_CHARS, Wording
from apps.reports.markdown import md_code, md_text
from apps.reports.redact import redacted, setting_secrets

FORMAT = "kope-knowledge-base"
VERSION = 1
IMPORTED_STATUSES = {Rule.Status.APPROVED, Rule.Status.PENDING, Rule.Status.CANDIDATE}
MAX_RULES = 5000
SOURCE_KEY_CHARS = 100  # Rule.source_key's max_length
# Far below what Python's recursion limit lets later exports of the imported rules walk.
MAX_DEPTH = 100


class ImportFileError(DomainError):
    """A knowledge-base file that cannot be imported; the message says what and where."""

    code = "bad_import_file"


# --- export ------------------------------------------------------------------------------------


def rule_entry(rule: Rule) -> dict[str, Any]:
    versions = sorted(rule.versions.all(), key=lambda v: v.number)
    return {
        "id": rule.pk, "source_key": rule.source_key, "status": rule.status,
        "approved_version": rule.approved_version.number if rule.approved_version else None,
        "frequency": rule.frequency, "created_at": rule.created_at.isoformat(),
        "versions": [{"number": v.number, "statement": v.statement,
                      "applies_when": v.applies_when, "not_when": v.not_when,
                      "evidence": v.evidence, "tokens": v.tokens,
                      "created_at": v.created_at.isoformat()} for v in versions],
        "history": [{"from": t.from_status, "to": t.to_status,
                     "version": t.version.number if t.version else None,
                     "by": str(t.actor or "system"), "comment": t.comment,
                     "at": t.at.isoformat()} for t in rule.transitions.all()],
    }  # fmt: skip


def knowledge_data(team: Team) -> dict[str, Any]:
    rules = (
        Rule.objects.filter(team=team)
        .select_related("approved_version")
        .prefetch_related("versions", "transitions__version", "transitions__actor")
        .order_by("pk")
    )
    data = {"format": FORMAT, "version": VERSION, "exported_at": timezone.now().isoformat(),
            "team": {"slug": team.slug, "name": team.name},
            "rules": [rule_entry(rule) for rule in rules]}  # fmt: skip
    return redacted(data, setting_secrets())  # type: ignore[no-any-return]


def knowledge_markdown(data: dict[str, Any]) -> str:
    team = data["team"]
    lines = [f"# Knowledge base of {md_text(team['name'])}", "",
             f"Exported {data['exported_at']} from KOPE Workbench ({len(data['rules'])} rules). "
             "The JSON export of the same rules can be imported into another team's review "
             "queue.", ""]  # fmt: skip
    for status in ("approved", "pending", "candidate", "vetoed", "retired"):
        rules = [r for r in data["rules"] if r["status"] == status]
        if rules:
            lines += [f"## {status.capitalize()} ({len(rules)})", ""]
            lines += [line for rule in rules for line in rule_markdown(rule)]
    return "\n".join(lines)


def rule_markdown(rule: dict[str, Any]) -> list[str]:
    shown = shown_version(rule)
    lines = [f"### Rule {rule['id']} v{shown['number']}: {md_text(shown['statement'])}", "",
             f"- **Applies when**: {md_text(shown['applies_when'])}"]  # fmt: skip
    if shown["not_when"]:
        lines.append(f"- **Not when**: {md_text(shown['not_when'])}")
    lines.append(f"- **Source**: {md_code(rule['source_key'])}")
    lines.append(f"- **Evidence**: {md_code(json.dumps(shown['evidence'], sort_keys=True))}")
    for step in rule["history"]:
        comment = f": {md_text(step['comment'])}" if step["comment"] else ""
        lines.append(f"- {step['at'][:19]} {step['from'] or '-'} -> {step['to']} "
                     f"by {md_text(step['by'])}{comment}")  # fmt: skip
    return [*lines, ""]


def shown_version(rule: dict[str, Any]) -> dict[str, Any]:
    """The approved wording of an approved rule, else the latest one."""
    versions = rule["versions"]
    approved = [v for v in versions if v["number"] == rule.get("approved_version")]
    return approved[0] if approved else max(versions, key=lambda v: v["number"])


# --- import: reading and checking the file (pure) ----------------------------------------------


@dataclass(frozen=True)
class ImportedRule:
    source_key: str
    wording: Wording
    evidence: dict[str, Any]


def _require(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise ImportFileError(f"{where}: {what}")


def _text(entry: dict[str, Any], name: str, where: str, *, required: bool = True,
          limit: int | None = None) -> str:  # fmt: skip
    value = entry.get(name, "")
    _require(isinstance(value, str), f"{where}.{name}", "must be a string")
    _require(not required or bool(value.strip()), f"{where}.{name}", "must not be empty")
    length = len(value.strip())
    _require(limit is None or length <= limit, f"{where}.{name}",
             f"is {length} characters; at most {limit}")  # fmt: skip
    return str(value)


def parse_knowledge_file(raw: bytes) -> dict[str, Any]:
    """The file as checked JSON: its format, version, team and a list of rules."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ImportFileError(f"the file is not UTF-8 text (byte {error.start})") from error
    except json.JSONDecodeError as error:
        raise ImportFileError(f"the file is not JSON: {error.msg} at line {error.lineno}, "
                              f"column {error.colno}") from error  # fmt: skip
    except ValueError as error:  # an integer over Python's digit limit
        raise ImportFileError(f"the file is not JSON this server reads: a number has over "
                              f"{sys.get_int_max_str_digits()} digits") from error  # fmt: skip
    except RecursionError:
        raise ImportFileError("the file is not JSON this server reads: nested too deeply") from None
    _require(isinstance(data, dict), "the file", "must be a JSON object")
    _require(
        data.get("format") == FORMAT,
        "format",
        f"must be {FORMAT!r} (a knowledge-base export), got {data.get('format')!r}",
    )
    _require(data.get("version") == VERSION, "version",
             f"must be {VERSION}, got {data.get('version')!r}")  # fmt: skip
    team = data.get("team")
    _require(isinstance(team, dict), "team", "must be an object with slug and name")
    _text(team, "slug", "team")
    rules = data.get("rules")
    _require(isinstance(rules, list), "rules", "must be a list")
    _require(len(rules) <= MAX_RULES, "rules", f"holds {len(rules)}; at most {MAX_RULES}")
    _check_storable(team, "team")
    _check_storable(rules, "rules")
    return data  # type: ignore[no-any-return]


def _check_storable(value: Any, where: str, depth: int = 1) -> None:
    """What is imported is kept as PostgreSQL text and JSON: no NUL, no NaN or Infinity."""
    _require(depth <= MAX_DEPTH, where, f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        _require("\x00" not in value, where, "holds a NUL character")
    elif isinstance(value, float):
        _require(math.isfinite(value), where, f"{json.dumps(value)} cannot be stored")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_storable(item, f"{where}[{index}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _require("\x00" not in key, where, "a key holds a NUL character")
            _check_storable(item, f"{where}.{key}", depth + 1)


def imported_rule(entry: Any, index: int, team: dict[str, Any]) -> ImportedRule | None:
    """One rule of the file, checked; None for one that is not imported (vetoed, retired)."""
    where = f"rules[{index}]"
    _require(isinstance(entry, dict), where, "must be an object")
    status = entry.get("status")
    _require(status in Rule.Status.values, f"{where}.status",
             f"must be one of {', '.join(Rule.Status.values)}, got {status!r}")  # fmt: skip
    versions = entry.get("versions")
    _require(isinstance(versions, list) and bool(versions), f"{where}.versions",
             "must be a non-empty list")  # fmt: skip
    for j, version in enumerate(versions):
        at = f"{where}.versions[{j}]"
        _require(isinstance(version, dict), at, "must be an object")
        _require(isinstance(version.get("number"), int), f"{at}.number", "must be a whole number")
        # The lengths a reviewer's wording keeps to: an imported rule is reviewed, edited and
        # put into the agent's context like one.
        _text(version, "statement", at, limit=MAX_STATEMENT_CHARS)
        _text(version, "applies_when", at, limit=MAX_CONDITION_CHARS)
        _text(version, "not_when", at, limit=MAX_CONDITION_CHARS, required=False)
        _require(isinstance(version.get("evidence", {}), dict), f"{at}.evidence",
                 "must be an object")  # fmt: skip
    history = entry.get("history", [])
    _require(isinstance(history, list), f"{where}.history", "must be a list")
    if status not in IMPORTED_STATUSES:
        return None
    shown = shown_version(entry)
    wording = Wording(shown["statement"], shown["applies_when"], shown.get("not_when", ""))
    key = imported_key(team["slug"], entry.get("id"), index)
    return ImportedRule(key, wording, imported_evidence(entry, shown, team))


def imported_key(team_slug: str, rule_id: Any, index: int) -> str:
    """Stable per source rule, so importing one file twice adds nothing the second time."""
    key = f"import:{team_slug}:{rule_id if isinstance(rule_id, int) else f'#{index}'}"
    if len(key) <= SOURCE_KEY_CHARS:
        return key
    # Cut to the column, the keys of one long slug's rules would all be the same key.
    return f"import:sha256:{hashlib.sha256(key.encode()).hexdigest()}"


def imported_evidence(entry: dict[str, Any], shown: dict[str, Any],
                      team: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    name = team.get("name") or team["slug"]
    original = shown.get("evidence") or {}
    return {
        **original,
        "provenance": f"imported from team {name}",
        "distilled_by": f"imported from team {name}"
        + (f" (worded there by {original['distilled_by']})" if original.get("distilled_by")
           else ""),
        "imported_from": {
            "team": team["slug"], "team_name": name, "rule_id": entry.get("id"),
            "status": entry["status"], "version": shown["number"],
            "source_key": entry.get("source_key"), "history": entry.get("history", []),
        },
    }  # fmt: skip


def imported_rules(data: dict[str, Any]) -> list[ImportedRule]:
    """Every rule checked before any is written; the first problem is the error."""
    found = [imported_rule(entry, i, data["team"]) for i, entry in enumerate(data["rules"])]
    require_distinct_ids(data["rules"])
    return [rule for rule in found if rule is not None]


def require_distinct_ids(rules: list[dict[str, Any]]) -> None:
    """Two rules with one id would share one key: the second would be dropped as imported."""
    first_at: dict[int, int] = {}
    for index, entry in enumerate(rules):
        rule_id = entry.get("id")
        if not isinstance(rule_id, int):
            continue
        _require(rule_id not in first_at, f"rules[{index}].id",
                 f"{rule_id} is also rules[{first_at.get(rule_id)}].id")  # fmt: skip
        first_at[rule_id] = index
