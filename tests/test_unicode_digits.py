"""Text that untrusted code writes (a model's adopted keys and strategy labels, a kernel's
output) may hold "²": str.isdigit() says yes to it and int() raises. Each parser of such text
reads it as no number instead of raising."""

from __future__ import annotations

from pathlib import Path

from apps.agents.offline.evidence import loop_number
from apps.agents.offline.path_moves import followed_case_id
from apps.devices.evaluator import read_outcome
from apps.memory.keys import id_in_key
from apps.memory.knowledge import Result


def test_a_key_with_a_superscript_names_no_row() -> None:
    assert id_in_key("rule:²", "rule") is None
    assert id_in_key("rule:12", "rule") == 12
    found = Result(key="doc:²", kind="doc", text="", similarity=None, target="cpu-c", operator="",
                   created_at=None)  # fmt: skip
    assert found.number is None


def test_a_label_with_a_superscript_names_no_case_and_no_loop() -> None:
    assert followed_case_id("replay(case=²)") == 0
    assert loop_number("L²") == 0
    assert loop_number("L3") == 3


def test_a_kernel_that_prints_a_superscript_in_the_protocol_does_not_stop_the_evaluator(
    tmp_path: Path,
) -> None:
    log = tmp_path / "harness.log"
    log.write_text("start r1\ndone r1 ²\nstart r2\ndone r2 0\n")
    outcome = read_outcome(log, returncode=0, timed_out=False)
    assert outcome.finished == {"r2": 0}
