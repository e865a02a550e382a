"""Malformed input to the operator-suite importers and the knowledge-base import: each is
refused with a reason that names the file (and the place in it), nothing dies, and nothing of
a refused import is left stored or left running.

No imported file is executed here: only the importers' parsing runs in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.memory.models import Rule, RuleTransition
from apps.operators.importers import kernelbench, npukernelbench
from apps.operators.importing import ImportRequestError, import_execute, import_start
from apps.operators.models import ImportRun
from apps.operators.spec import SpecError, parse_operator_toml
from apps.reports.knowledge import ImportFileError
from apps.reports.models import Export
from apps.reports.services import knowledge_import
from tests.factories import MembershipFactory
from tests.operators.conftest import SAMPLES
from tests.operators.test_spec import GOOD as SPEC

# ---------------------------------------------------------------------------------------------
# Files on disk


def test_a_file_name_that_is_not_utf8_is_reported_and_the_run_finishes(
    team: Team, tmp_path: Path
) -> None:
    level = tmp_path / "level1"
    level.mkdir()
    (level / "1_Helper.py").write_text("x = 1\n")
    os.close(os.open(os.fsencode(level) + b"/2_Bad\xffname.py", os.O_CREAT | os.O_WRONLY))
    run = import_start(path=str(tmp_path), fmt=None, scale=1.0, team=team, user=None,
                       restrict=False)  # fmt: skip

    run = import_execute(run)

    run.refresh_from_db()
    assert run.status == ImportRun.Status.DONE and run.done == run.total == 2
    [helper, bad] = run.report
    assert helper["outcome"] == "skipped"
    assert bad["outcome"] == "failed"
    assert bad["problem"] == "level1/2_Bad\\xffname.py"
    assert bad["reason"] == "level1/2_Bad\\xffname.py: the name is not UTF-8"


def test_an_npukernelbench_folder_name_that_is_not_utf8_fails_its_operator(tmp_path: Path) -> None:
    validation = os.fsencode(tmp_path) + b"/level1/activation/Re\xfflu/validation"
    os.makedirs(validation)
    os.close(os.open(validation + b"/module.py", os.O_CREAT | os.O_WRONLY))

    [found] = npukernelbench.discover(tmp_path)

    assert found.label == "level1/activation/Re\\xfflu"
    assert found.failure == "level1/activation/Re\\xfflu: the name is not UTF-8"


def test_an_import_folder_whose_name_is_not_utf8_is_refused_with_the_reason(
    team: Team, tmp_path: Path
) -> None:
    folder = os.fsencode(tmp_path) + b"/kernel\xffbench"
    os.makedirs(folder + b"/level1")

    with pytest.raises(ImportRequestError, match="is not a usable path: it is not UTF-8"):
        import_start(path=os.fsdecode(folder), fmt=None, scale=1.0, team=team, user=None,
                     restrict=False)  # fmt: skip
    assert not ImportRun.objects.exists()


def test_a_fifo_named_like_a_problem_fails_it_instead_of_blocking_the_import(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "level1" / "1_Pipe.py"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    found: list[Any] = []
    reader = threading.Thread(
        target=lambda: found.append(kernelbench.found_problem(fifo, root=tmp_path, scale=1.0)),
        daemon=True,
    )

    reader.start()
    reader.join(timeout=10)

    if reader.is_alive():  # unblock the reader so the thread ends with the test
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
        pytest.fail("reading a FIFO blocked the importer")
    assert found[0].failure == "level1/1_Pipe.py: not a regular file"


@pytest.mark.parametrize("target", ["file", "/dev/null"])
def test_a_link_to_a_file_outside_the_folder_is_not_read(tmp_path: Path, target: str) -> None:
    """A link inside an import root to a file outside it got round KOPE_IMPORT_ROOTS, and one
    to /dev/zero (a device's size is 0, under any limit) was read until memory ran out;
    /dev/null, as harmless to read, stands in for it."""
    outside = tmp_path / "outside.py"
    outside.write_text(Path("apps/operators/builtin/relu/reference.py").read_text())
    root = tmp_path / "root"
    link = root / "level1" / "1_Elsewhere.py"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside if target == "file" else Path(target))

    found = kernelbench.found_problem(link, root=root, scale=1.0)

    reason = "a link to a file outside the folder being imported"
    assert found.failure == f"level1/1_Elsewhere.py: {reason}"


# ---------------------------------------------------------------------------------------------
# operator.toml: values that passed the parser but broke a later run or store


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        ("rows = 3,", 'rows = "abc",',
         "case 'small': rows = 'abc' is not a size (a whole number, 0 or more)"),
        ("rows = 3,", "rows = -4,",
         "case 'small': rows = -4 is not a size (a whole number, 0 or more)"),
        ("rows = 3,", "rows = 1979-05-27,",
         "case 'small': rows = datetime.date(1979, 5, 27) is not a size"),
        ("alpha = -1.5", "alpha = nan",
         "case 'small': attribute alpha = nan is not a finite number"),
        ("default = 2.0", 'default = "abc"',
         "attribute 'alpha' default 'abc' is not a finite number"),
        ("cols = 5,", "cols = 5, note = 1979-05-27T07:32:00,",
         "case 'small': note = datetime.datetime(1979, 5, 27, 7, 32) is not a finite number, text"),
        ("cols = 5,", 'cols = 5, note = ["\\u0000"],',
         "case 'small': note = ['\\x00'] is not a finite number, text"),
        ("level = 1", "level = 1.9", "level = 1.9 is not a whole number"),
        ("level = 1", 'level = "2"', "level = '2' is not a whole number"),
        ("timing = true", 'timing = "no"', "case 'big': timing = 'no' is not true or false"),
        ('shape = ["rows", "cols"]', 'shape = ["rows", -3]',
         "tensor 'x': dimension -3 is neither a size (a whole number, 0 or more) nor a case "
         "parameter's name"),
        ('shape = ["rows", "cols"]', 'shape = [2.7, "cols"]', "tensor 'x': dimension 2.7 is"),
        ('shape = ["rows", "cols"]', 'shape = ["rows", true]', "tensor 'x': dimension True is"),
    ],
)  # fmt: skip
def test_an_operator_toml_value_a_run_could_not_use_is_a_spec_error(
    old: str, new: str, complaint: str
) -> None:
    assert old in SPEC
    with pytest.raises(SpecError) as error:
        parse_operator_toml(SPEC.replace(old, new, 1), where="operator.toml")
    assert str(error.value).startswith(f"operator.toml: {complaint}")


# ---------------------------------------------------------------------------------------------
# Knowledge-base files


def knowledge_rule(rule_id: int, evidence: Any = None) -> dict[str, Any]:
    version = {"number": 1, "statement": "Tile the k loop", "applies_when": "matmul-like",
               "not_when": "", "evidence": evidence or {"operators": ["gemm"]}}  # fmt: skip
    return {"id": rule_id, "source_key": "case:42", "status": "pending",
            "approved_version": None, "versions": [version], "history": []}  # fmt: skip


def knowledge_file(evidence: Any = None, **changes: Any) -> bytes:
    """A good rule, then one with the given evidence and changes."""
    data = {"format": "kope-knowledge-base", "version": 1, "exported_at": "2026-01-01",
            "team": {"slug": "origin", "name": "Origin"},
            "rules": [knowledge_rule(1), knowledge_rule(7, evidence) | changes]}  # fmt: skip
    return json.dumps(data).encode()


def refused(team: Team, raw: bytes) -> str:
    """The reason a knowledge import was refused; nothing of it is stored, its row failed."""
    reviewer = MembershipFactory(team=team, role=Role.REVIEWER).user
    transitions = RuleTransition.objects.count()
    with pytest.raises(ImportFileError) as error:
        knowledge_import(team=team, user=reviewer, filename="kb.json", raw=raw)
    assert not Rule.objects.filter(team=team).exists()
    assert RuleTransition.objects.count() == transitions
    failed = Export.objects.get(team=team)
    assert failed.status == Export.Status.FAILED and failed.error == str(error.value)
    return str(error.value)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (knowledge_file({"speedup": 1e999}),
         "rules[1].versions[0].evidence.speedup: Infinity cannot be stored"),
        (knowledge_file({"ratio": "?"}).replace(b'"?"', b"NaN"),
         "rules[1].versions[0].evidence.ratio: NaN cannot be stored"),
        (knowledge_file({"note": "a\x00b"}),
         "rules[1].versions[0].evidence.note: holds a NUL character"),
        (knowledge_file(history=[{"comment": "\x00"}]),
         "rules[1].history[0].comment: holds a NUL character"),
        (knowledge_file().replace(b'"Origin"', b'"Ori\\u0000gin"'),
         "team.name: holds a NUL character"),
        (knowledge_file().replace(b'"Tile', b'"\\u0000Tile'),
         "rules[0].versions[0].statement: holds a NUL character"),
        (knowledge_file().replace(b'"gemm"', b"9" * 5000),
         "the file is not JSON this server reads: a number has over 4300 digits"),
        (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
         "the file is not JSON this server reads: nested too deeply"),
    ],
)  # fmt: skip
def test_a_knowledge_file_postgresql_cannot_store_is_refused_saying_where(
    other_team: Team, raw: bytes, reason: str
) -> None:
    assert refused(other_team, raw) == f"kb.json: {reason}"


def test_a_knowledge_file_nested_too_deeply_to_export_again_is_refused(other_team: Team) -> None:
    # Python reads 600 levels, but the team's knowledge-base export could not walk them.
    raw = knowledge_file({"deep": json.loads("[" * 600 + "]" * 600)})

    reason = refused(other_team, raw)

    deepest = "rules[1].versions[0].evidence.deep" + "[0]" * 95
    assert reason == f"kb.json: {deepest}: nested more than 100 levels deep"


def test_a_knowledge_file_with_two_rules_of_one_id_is_refused(other_team: Team) -> None:
    """The second shared the first's key and was dropped as "already imported"."""
    data = json.loads(knowledge_file())
    data["rules"][1]["id"] = 1

    reason = refused(other_team, json.dumps(data).encode())

    assert reason == "kb.json: rules[1].id: 1 is also rules[0].id"


def test_two_npukernelbench_operators_of_one_name_are_told_apart_by_category(
    tmp_path: Path,
) -> None:
    """The real suite's level 2 has SwiGlu under Activation and under Math."""
    relu = SAMPLES / "npukernelbench" / "level1" / "activation" / "Relu"
    for category in ("Activation", "Math"):
        shutil.copytree(relu, tmp_path / "level2" / category / "SwiGlu")
    shutil.copytree(relu, tmp_path / "level2" / "Math" / "Relu")

    slugs = [found.definition.spec.slug for found in npukernelbench.discover(tmp_path)
             if found.definition is not None]  # fmt: skip

    assert sorted(slugs) == ["npu_l2_activation_swi_glu", "npu_l2_math_swi_glu", "npu_l2_relu"]
