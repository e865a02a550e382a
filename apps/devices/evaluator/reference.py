"""The reference runner's stage: each run's inputs and expected outputs, made from its seed
before any candidate code is loaded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from apps.devices.evaluator.judging import is_regular_file
from apps.devices.evaluator.runs import OperatorUnderTest, Run
from apps.devices.evaluator.settings import EvaluationError
from apps.devices.evaluator.workspace import Workspace
from apps.operators.sandbox import ReferenceRunError, run_reference
from apps.sandbox import policies


def generate(workspace: Workspace, operator: OperatorUnderTest, runs: list[Run]) -> None:
    """The reference (outside code) writes inputs and expected outputs in a folder of its own;
    the inputs are moved to the sandbox's folder, the expected outputs to the judge's."""
    with policies.workdir("reference-", parent=workspace.root) as folder:
        request = {
            "kind": operator.reference_kind, "source": operator.reference_source,
            "mode": "generate", "input_dir": str(folder), "expected_dir": str(folder),
            "runs": [{"run_id": r.run_id, "params": r.params, "dtype": r.dtype, "seed": r.seed}
                     for r in runs if r.repeat_of is None],
        }  # fmt: skip
        try:
            answer = run_reference(request, workdir=folder)
        except ReferenceRunError as error:
            raise EvaluationError(f"the reference of {operator.label} failed: {error}") from None
        by_id = {g["run_id"]: g for g in answer["runs"]}
        for run in runs:
            generated = by_id[run.repeat_of or run.run_id]
            if "error" in generated:
                raise EvaluationError(f"the reference of {operator.label} failed on "
                                      f"{run.case_id}: {generated['error']}")  # fmt: skip
            run.generated = generated
            run.attrs = run.attrs + list(generated["scalars"])
            if run.repeat_of is None:
                take_generated(folder, workspace, run)


def take_generated(folder: Path, workspace: Workspace, run: Run) -> None:
    for kind, target, mode in (("in", workspace.sandbox, 0o666), ("out", workspace.judge, 0o600)):
        for i in range(len(run.generated[f"{kind}puts"])):
            name = f"{run.run_id}.{kind}{i}"
            if not is_regular_file(folder / name):
                raise EvaluationError(f"the reference wrote no plain file {name}")
            os.rename(folder / name, target / name)
            (target / name).chmod(mode)


def copy_inputs_for_repeats(workspace: Workspace, runs: list[Run]) -> None:
    for run in runs:
        if run.repeat_of:
            for i in range(len(run.generated["inputs"])):
                target = workspace.sandbox / f"{run.run_id}.in{i}"
                shutil.copyfile(workspace.sandbox / f"{run.repeat_of}.in{i}", target)
                target.chmod(0o666)
