"""Two cases side by side: their code diff (unified or split, whitespace counted or not),
their measurements with deltas, and their per-line profile costs. Plain functions, no ORM."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

WHITESPACE = re.compile(r"\s+")
Matcher = difflib.SequenceMatcher[str]


def _comparable(line: str, ignore_whitespace: bool) -> str:
    return WHITESPACE.sub("", line) if ignore_whitespace else line


def _matcher(old: list[str], new: list[str], ignore_whitespace: bool) -> Matcher:
    return difflib.SequenceMatcher(
        None,
        [_comparable(line, ignore_whitespace) for line in old],
        [_comparable(line, ignore_whitespace) for line in new],
        autojunk=False,
    )


def unified_diff_text(old: str, new: str, *, old_name: str, new_name: str,
                      ignore_whitespace: bool = False) -> str:  # fmt: skip
    """A unified diff (with ---/+++ headers, for diff2html); lines that differ only in
    whitespace are context when `ignore_whitespace` is set. Empty when nothing differs."""
    a, b = old.splitlines(), new.splitlines()
    groups = _matcher(a, b, ignore_whitespace).get_grouped_opcodes(3)
    hunks = [_hunk(a, b, group) for group in groups]
    if not hunks:
        return ""
    return f"--- {old_name}\n+++ {new_name}\n" + "".join(hunks)


def _hunk(a: list[str], b: list[str], group: list[Any]) -> str:
    first, last = group[0], group[-1]
    old_start, old_end, new_start, new_end = first[1], last[2], first[3], last[4]
    old_range = f"-{old_start + 1},{old_end - old_start}"
    new_range = f"+{new_start + 1},{new_end - new_start}"
    lines = [f"@@ {old_range} {new_range} @@\n"]
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            lines += [f" {line}\n" for line in b[j1:j2]]
            continue
        lines += [f"-{line}\n" for line in a[i1:i2]]
        lines += [f"+{line}\n" for line in b[j1:j2]]
    return "".join(lines)


@dataclass(frozen=True)
class DiffRow:
    kind: str  # equal, add, del, change
    old_number: int | None
    old_text: str
    new_number: int | None
    new_text: str


def diff_rows(old: str, new: str, *, ignore_whitespace: bool = False) -> list[DiffRow]:
    """Every line of both sides, paired for a split view: changed blocks row by row, an
    unpaired line opposite a blank. A unified view reads the same rows (del before add)."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in _matcher(a, b, ignore_whitespace).get_opcodes():
        if tag == "equal":
            rows += [DiffRow("equal", i + 1, a[i], j + 1, b[j])
                     for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]  # fmt: skip
            continue
        for offset in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + offset, j1 + offset
            left = (i + 1, a[i]) if i < i2 else (None, "")
            right = (j + 1, b[j]) if j < j2 else (None, "")
            kind = "change" if left[0] and right[0] else ("del" if left[0] else "add")
            rows.append(DiffRow(kind, left[0], left[1], right[0], right[1]))
    return rows


def unified_rows(rows: list[DiffRow]) -> list[tuple[str, int | None, int | None, str]]:
    """The split rows as one column: (kind, old number, new number, text)."""
    out: list[tuple[str, int | None, int | None, str]] = []
    for row in rows:
        if row.kind == "equal":
            out.append(("equal", row.old_number, row.new_number, row.new_text))
            continue
        if row.old_number is not None:
            out.append(("del", row.old_number, None, row.old_text))
        if row.new_number is not None:
            out.append(("add", None, row.new_number, row.new_text))
    return out


# --- measurements -----------------------------------------------------------------------------

# (label, key, which way is better)
MEASURES = [
    ("latency (ms)", "latency_ms", "lower"),
    ("speedup vs PyTorch eager", "speedup_vs_reference", "higher"),
    ("speedup vs its parent", "speedup_vs_parent", "higher"),
    ("kernel instructions", "kernel_instructions", "lower"),
    ("kernel D1 miss rate", "kernel_d1_miss_rate", "lower"),
    ("kernel LL miss rate", "kernel_ll_miss_rate", "lower"),
]


def measurement_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measure of A and B with B's change relative to A and whether B is better."""
    rows = []
    for label, key, better in MEASURES:
        left, right = a.get(key), b.get(key)
        if left is None and right is None:
            continue
        rows.append({"label": label, "a": left, "b": right, "a_text": measure_text(left),
                     "b_text": measure_text(right), **_delta(left, right, better)})  # fmt: skip
    return rows


def measure_text(value: Any) -> str:
    """A count as a whole number with thousands marked (218,210,335, never 218210335.0000),
    a ratio or a time to four significant digits; "-" for none."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    if isinstance(value, int) or (value.is_integer() and abs(value) >= 1000):
        return f"{round(value):,}"
    return f"{value:.4g}"


def _delta(left: Any, right: Any, better: str) -> dict[str, Any]:
    if not isinstance(left, int | float) or not isinstance(right, int | float) or left == 0:
        return {"change": None, "verdict": ""}
    change = (right - left) / abs(left)
    if abs(change) < 0.005:
        return {"change": change, "verdict": "same"}
    improved = change < 0 if better == "lower" else change > 0
    return {"change": change, "verdict": "better" if improved else "worse"}
