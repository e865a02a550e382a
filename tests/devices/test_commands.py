"""`manage.py gpu_check`, `check_kernels` and `evaluate` meet options they cannot use with what
was wrong, before anything runs, not a traceback after the run or a report that misstates it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from apps.devices.evaluator import EvalSettings
from apps.devices.management.commands.evaluate import stopped
from apps.devices.models import Evaluation
from apps.devices.services import claim_attempt, evaluation_request
from apps.operators import builtin_suite
from tests.factories import stored_builtin
from tests.interrupts import command_caught_mid_query
from tests.processes import as_a_terminal_starts_it, wait_until
from tests.workbench.test_live_events import process_env

MAX_SEED = 2**64 - 1  # the most torch.Generator.manual_seed takes


def test_gpu_check_refuses_an_output_dir_it_cannot_write_before_it_runs(tmp_path: Path) -> None:
    """It used to evaluate every operator first and then end in a FileExistsError traceback,
    the report lost."""
    taken = tmp_path / "a-file"
    taken.write_text("")
    out = StringIO()
    reason = f"--output-dir {taken}: not a folder it can write to: "
    with pytest.raises(CommandError, match=f"^{reason}"):
        call_command("gpu_check", "--allow-interpreter", "--operators", "vector_add",
                     "--repeats", "1", "--output-dir", str(taken), stdout=out)  # fmt: skip
    assert "vector_add" not in out.getvalue()  # nothing was evaluated


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (["--operators", ","], "--operators names no operator"),
        (["--operators", ""], "--operators names no operator"),
        (["--operators", "vector_add,nosuch"], "--operators: no built-in operator 'nosuch'"),
        (["--operators", "vector_add,gemm"],
         r"--operators: gemm has no Triton starting kernel \(naive_triton.py\)"),
        (["--repeats", "0"], "--repeats 0: must be at least 1"),
        (["--repeats", "-2"], "--repeats -2: must be at least 1"),
    ],
)  # fmt: skip
def test_gpu_check_refuses_operators_and_repeats_it_cannot_use_before_it_runs(
    tmp_path: Path, arguments: list[str], reason: str
) -> None:
    """An --operators naming none wrote an empty report; an unknown operator or one without a
    Triton kernel stopped the run after the operators before it, with the KeyError's quotes
    around the message; --repeats 0 ran once under a report header that said 0."""
    out = StringIO()
    with pytest.raises(CommandError, match=f"^{reason}$"):
        call_command("gpu_check", "--allow-interpreter", "--output-dir", str(tmp_path),
                     *arguments, stdout=out)  # fmt: skip
    assert "vector_add" not in out.getvalue()  # nothing was evaluated
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seed", ["-1", str(MAX_SEED + 1)])
def test_check_kernels_refuses_a_seed_torch_cannot_take(seed: str) -> None:
    """A seed past 2**64 - 1 failed every case with "ValueError: Overflow when unpacking long
    long" and exited with "1 operator(s) failed", as if the kernel were wrong."""
    out = StringIO()
    with pytest.raises(CommandError, match=f"^--seed {seed}: must be from 0 to {MAX_SEED}$"):
        call_command("check_kernels", "relu", "--seed", seed, stdout=out)
    assert out.getvalue() == ""


def test_check_kernels_takes_the_largest_seed() -> None:
    out = StringIO()
    call_command("check_kernels", "relu", "--seed", str(MAX_SEED), stdout=out)
    assert "ok   relu/one: " in out.getvalue() and "FAIL" not in out.getvalue()


def test_evaluate_refuses_flags_outside_the_allowlist_before_anything_is_stored(db: None) -> None:
    """A flag off the allowlist is a bad option, not a kernel's fault: it used to store and
    print a REJECTED evaluation of a correct kernel, and exit 0."""
    stored_builtin("relu")
    with pytest.raises(CommandError, match=r"^--flags: flags not allowed: -fplugin=x \(allowed: "):
        call_command("evaluate", "relu", "apps/operators/builtin/relu/naive.c",
                     "--flags=-O2 -fplugin=x", "--no-timing", stdout=StringIO())  # fmt: skip
    assert not Evaluation.objects.exists()


@pytest.mark.parametrize(
    "command",
    [["check_kernels", "relu"], ["gpu_check", "--allow-interpreter", "--operators", "relu"]],
    ids=lambda c: c[0],
)
def test_a_builtin_operator_toml_being_edited_is_named_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """An operator.toml with a slip in it, the moment check_kernels is for, ended in a
    SpecError traceback."""
    shutil.copytree(builtin_suite.BUILTIN_DIR / "relu", tmp_path / "relu")
    with (tmp_path / "relu" / "operator.toml").open("a") as toml:
        toml.write("level = = 1\n")
    monkeypatch.setattr(builtin_suite, "BUILTIN_DIR", tmp_path)
    with pytest.raises(CommandError, match=r"^relu/operator.toml: not valid TOML: "):
        call_command(*command, stdout=StringIO())  # gpu_check stops before it writes


def test_evaluate_stopped_by_ctrl_c_ends_failed_not_running(transactional_db: None) -> None:
    """Ctrl-C printed a KeyboardInterrupt traceback and left the evaluation "running": an agent
    worker that started later ran it, and after two Ctrl-Cs the next `evaluate` gave up at once
    with "the worker stopped during each (killed, or out of memory)"."""
    stored_builtin("relu")
    command = [sys.executable, "manage.py", "evaluate", "relu",
               "apps/operators/builtin/relu/naive.c", "--repeats", "100000"]  # fmt: skip
    process = subprocess.Popen(command, env=process_env("single-machine"), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=as_a_terminal_starts_it)  # fmt: skip
    try:
        wait_until(lambda: Evaluation.objects.filter(status="running").exists(), 120,
                   "the evaluation to start")  # fmt: skip
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = communicate_or_show_stacks(process, timeout_s=120)

    evaluation = Evaluation.objects.get()
    assert (evaluation.status, evaluation.error) == ("failed", "stopped by Ctrl-C"), stderr
    assert process.returncode == 1, stdout + stderr
    reason = f"evaluation {evaluation.pk} stopped by Ctrl-C; nothing was judged"
    assert stderr.strip().splitlines()[-1] == f"CommandError: {reason}"
    assert "Traceback" not in stderr


def communicate_or_show_stacks(
    process: subprocess.Popen[str], *, timeout_s: float
) -> tuple[str, str]:
    """Its output; a command still running then fails the test with where it was stuck."""
    try:
        return process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)  # manage.py prints every thread's stack
        time.sleep(2)
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"still running {timeout_s:g} s after Ctrl-C:\n{stderr[-6000:]}")


def test_ctrl_c_during_a_query_still_ends_the_evaluation_failed(transactional_db: None) -> None:
    """Ctrl-C that landed while psycopg was sending a query left the connection "another
    command is already in progress", and the command's own update failed on it: the evaluation
    stayed "running" (seen in one full test run of the test above)."""
    evaluation, _ = evaluation_request(version=stored_builtin("relu"), source_text="int x;",
                                       options=EvalSettings(timing=False))  # fmt: skip
    claim_attempt(evaluation.pk, max_attempts=3)
    command_caught_mid_query()

    with pytest.raises(CommandError, match=f"^evaluation {evaluation.pk} stopped by Ctrl-C"):
        stopped(evaluation.pk)

    evaluation.refresh_from_db()
    assert (evaluation.status, evaluation.error) == ("failed", "stopped by Ctrl-C")


@pytest.mark.parametrize("text", ["", " \n\t\n"], ids=["empty", "blank"])
def test_evaluate_refuses_an_empty_kernel_file_storing_nothing(
    db: None, tmp_path: Path, text: str
) -> None:
    """It compiled nothing, stored a REJECTED verdict for it and listed that evaluation
    beside real ones: a wrong path or a truncated file, judged as a kernel."""
    stored_builtin("relu")
    empty = tmp_path / "kernel.c"
    empty.write_text(text)
    with pytest.raises(CommandError, match=f"^{empty} is empty: no kernel to evaluate$"):
        call_command("evaluate", "relu", str(empty), "--no-timing", stdout=StringIO())
    assert not Evaluation.objects.exists()


def test_check_kernels_without_gcc_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without gcc (the README's one requirement beyond Python and make) ended in a
    FileNotFoundError traceback from deep in the compile step."""
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder with no gcc in it
    out = StringIO()
    reason = "no gcc on PATH: check_kernels compiles each kernel with it"
    with pytest.raises(CommandError, match=f"^{reason}$"):
        call_command("check_kernels", "relu", stdout=out)
    assert out.getvalue() == ""


@pytest.mark.parametrize(
    ("kernel", "returncode", "verdict"),
    [("y[i] = x[i] > 0.0f ? x[i] : 0.0f;", 0, "CORRECT"), ("y[i] = x[i];", 1, "INCORRECT")],
    ids=["correct", "incorrect"],
)
def test_evaluate_exits_1_after_the_verdict_unless_it_is_correct(
    transactional_db: None, tmp_path: Path, kernel: str, returncode: int, verdict: str
) -> None:
    """It exited 0 whatever the verdict, so `evaluate OPERATOR kernel.c && deploy` deployed a
    wrong kernel."""
    stored_builtin("relu")
    naive = Path("apps/operators/builtin/relu/naive.c").read_text()
    source = tmp_path / "kernel.c"
    source.write_text(naive.replace("y[i] = x[i] > 0.0f ? x[i] : 0.0f;", kernel))
    run = subprocess.run([sys.executable, "manage.py", "evaluate", "relu", str(source),
                          "--no-timing"], env=process_env("single-machine"), capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip

    assert run.returncode == returncode, run.stdout + run.stderr
    evaluation = Evaluation.objects.get()
    assert run.stdout.startswith(f"evaluation {evaluation.pk} of relu v1\nverdict: {verdict}\n")
    assert "environment: " in run.stdout  # the whole verdict, as before
    if returncode:
        assert (
            run.stderr.strip().splitlines()[-1] == "CommandError: verdict INCORRECT: exit status 1"
        )
    else:
        assert run.stderr == ""
