"""A report's data read from the database: a session's configuration, cases with their
verdicts, per-operator results, the rules it used and the suite figures. Every format renders
this one dict, so they cannot disagree; the JSON export is the dict itself."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.utils import timezone

from apps.memory.journal import incumbent_cases
from apps.memory.keys import id_in_key, rule_key
from apps.memory.models import Case, JournalEvent, Rule
from apps.reports.figures import OperatorRow, operator_rows, side_by_side, suite_figures
from apps.reports.redact import redacted, setting_secrets
from apps.runs.models import OptimizationSession

FORMAT_VERSION = 1


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def case_rows(session: OptimizationSession) -> list[dict[str, Any]]:
    cases = (
        Case.objects.filter(session_id=session.pk)
        .select_related("version__operator", "source")
        .order_by("iteration", "pk")
    )
    incumbents = incumbent_cases(session.pk)
    return [
        {
            "id": c.pk, "operator": c.version.operator.slug, "operator_version": c.version.number,
            "iteration": c.iteration, "parent_id": c.parent_id, "strategy": c.strategy,
            "tags": c.tags, "outcome": c.outcome, "correct": c.correct,
            "latency_ms": c.latency_ms, "speedup_vs_reference": c.speedup_vs_reference,
            "speedup_vs_parent": c.speedup_vs_parent, "new_incumbent": c.pk in incumbents,
            "confidence": c.confidence,
            "source_sha256": c.source.sha256 if c.source else None,
            "verdict": {"validation": c.validation, "feedback": c.feedback},
            "retrieved": c.retrieved, "adopted": c.adopted, "created_at": iso(c.created_at),
        }
        for c in cases
    ]  # fmt: skip


def session_events(session: OptimizationSession, kinds: tuple[str, ...]) -> list[JournalEvent]:
    return list(JournalEvent.objects.filter(session_id=session.pk, kind__in=kinds).order_by("seq"))


def rules_used(session: OptimizationSession, cases: list[dict[str, Any]],
               contexts: list[JournalEvent]) -> list[dict[str, Any]]:  # fmt: skip
    """The team's rules this session adopted in a candidate or carried in its hot tier."""
    adopted = Counter(a["key"] for c in cases for a in c["adopted"] if a["key"].startswith("rule:"))
    hot = Counter(k for e in contexts for k in e.payload.get("hot_rules", []))
    ids = {n for k in {*adopted, *hot} if (n := id_in_key(k, "rule")) is not None}
    rules = Rule.objects.filter(team=session.team, pk__in=ids).prefetch_related("versions")
    out = []
    for rule in sorted(rules, key=lambda r: r.pk):
        key = rule_key(rule.pk)
        version = rule.approved_version or max(rule.versions.all(), key=lambda v: v.number)
        out.append({
            "id": rule.pk, "status": rule.status, "version": version.number,
            "statement": version.statement, "applies_when": version.applies_when,
            "not_when": version.not_when, "adopted_in_cases": adopted[key],
            "hot_tier_iterations": hot[key],
        })  # fmt: skip
    return out


def operator_tokens(session: OptimizationSession) -> dict[str, int]:
    tokens: Counter[str] = Counter()
    for e in session_events(session, ("model_called",)):
        tokens[e.payload.get("operator", "")] += sum(e.payload.get("usage", {}).values())
    return dict(tokens)


def session_data(session: OptimizationSession) -> dict[str, Any]:
    """Everything a session report shows, from its rows."""
    config = session.config
    operators = [entry["slug"] for entry in config.get("operators", [])]
    cases = case_rows(session)
    finished = {e.payload["operator"]: e.payload
                for e in session_events(session, ("operator_finished",))}  # fmt: skip
    rows = operator_rows(operators, finished, cases, operator_tokens(session))
    suite = config.get("suite")
    return {
        "session": {
            "id": session.pk, "label": session.label, "team": session.team.slug,
            "status": session.status, "status_reason": session.status_reason,
            "target": session.target, "policy": session.policy,
            "memory_mode": session.memory_mode, "tokens_used": session.tokens_used,
            "suite": suite, "created_by": str(session.created_by or "system"),
            "created_at": iso(session.created_at), "finished_at": iso(session.finished_at),
            "rerun_of": session.rerun_of_id,
        },
        "config": config,
        "summary": suite_figures(rows, mode=session.memory_mode, tokens_used=session.tokens_used)
        | {"cases": len(cases), "correct_cases": sum(c["correct"] for c in cases)},
        "operators": [asdict(r) for r in rows],
        "cases": cases,
        "rules_used": rules_used(session, cases, session_events(session, ("context_assembled",))),
    }  # fmt: skip


def session_title(session: OptimizationSession) -> str:
    suite = (session.config or {}).get("suite")
    if suite:
        return f"Suite report: {suite.get('name') or suite.get('slug')}, session {session.pk}"
    return f"Session report: session {session.pk}" + (f" ({session.label})" if session.label
                                                        else "")  # fmt: skip


def report_meta(kind: str, title: str) -> dict[str, Any]:
    return {"kind": kind, "title": title, "format_version": FORMAT_VERSION,
            "generated_at": timezone.now().isoformat()}  # fmt: skip


def session_report(session: OptimizationSession) -> dict[str, Any]:
    data = {"report": report_meta("session", session_title(session)),
            "sessions": [session_data(session)]}  # fmt: skip
    return redacted(data, setting_secrets())  # type: ignore[no-any-return]


def comparison_report(a: OptimizationSession, b: OptimizationSession) -> dict[str, Any]:
    first, second = session_data(a), session_data(b)
    rows = [OperatorRow(**r) for r in first["operators"]]
    other = [OperatorRow(**r) for r in second["operators"]]
    title = f"Comparison: session {a.pk} ({a.memory_mode}) vs session {b.pk} ({b.memory_mode})"
    data = {"report": report_meta("comparison", title), "sessions": [first, second],
            "comparison": side_by_side(rows, other)}  # fmt: skip
    return redacted(data, setting_secrets())  # type: ignore[no-any-return]
