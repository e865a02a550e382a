"""Compiler output, parsed: file, line, column, message and the offending source line."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

# gcc and clang: "kernel.c:12:5: error: expected ';' before '}' token". Line and column are
# ASCII digits of a bounded length, so a garbled line never reaches int() with a huge number.
DIAGNOSTIC = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>[0-9]{1,9}):(?P<column>[0-9]{1,9}): "
    r"(?P<severity>fatal error|error|warning|note): (?P<message>.*)$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class CompilerMessage:
    file: str
    line: int
    column: int
    severity: str  # error | warning | note
    message: str
    source_line: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_compiler_output(
    output: str, source: str, *, source_name: str = "kernel.c"
) -> list[CompilerMessage]:
    """Every diagnostic gcc printed; source lines are quoted from `source` for `source_name`."""
    lines = source.splitlines()
    messages = []
    for match in DIAGNOSTIC.finditer(output):
        number = int(match["line"])
        quoted = (
            lines[number - 1]
            if match["file"].endswith(source_name) and 0 < number <= len(lines)
            else ""
        )
        severity = "error" if match["severity"] == "fatal error" else match["severity"]
        file = match["file"].rsplit("/", 1)[-1]
        message = match["message"].strip()
        messages.append(
            CompilerMessage(file, number, int(match["column"]), severity, message, quoted.rstrip())
        )
    return messages


def errors_only(messages: list[CompilerMessage]) -> list[CompilerMessage]:
    return [m for m in messages if m.severity == "error"]
