"""apps/sandbox/landlock.py: the files a confined child may read, execute and write, against
real child processes (confined with confine_child, which puts them in the domain)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from apps.sandbox import landlock
from apps.sandbox.landlock import Files, restrict_files
from tests.sandbox.children import (
    CHILD_PYTHON,
    REPO_ROOT,
    TEST_LIMITS,
    give_to_sandbox_user,
    needs_child_python,
    output_lines,
    run_confined,
    with_files,
)

LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-x86-64.so.2")
needs_landlock = pytest.mark.skipif(not landlock.landlock_abi(), reason="no Landlock here")


def python_files(
    readable: tuple[str, ...] = (),
    executable: tuple[str, ...] = (),
    writable: tuple[str, ...] = (),
) -> Files:
    """What the child interpreter needs (its files and this project's apps/ to read, itself
    and the loader to execute), and the paths a test names besides."""
    python = str(Path(str(CHILD_PYTHON)).resolve())
    return Files(
        readable=("/usr", "/lib", "/lib64", str(REPO_ROOT / "apps"), *readable),
        executable=(python, *LOADERS, *executable),
        listable=(str(REPO_ROOT),),
        writable=writable,
    )


def test_every_path_lists_each_kind_in_order() -> None:
    files = Files(readable=("/r",), executable=("/x",), listable=("/l",), writable=("/w",))
    assert files.every_path() == ("/r", "/x", "/l", "/w")


def test_without_landlock_a_required_domain_is_an_error_and_else_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(landlock, "landlock_abi", lambda: 0)
    with pytest.raises(OSError, match="this kernel has no Landlock"):
        restrict_files("/nonexistent", Files(), required=True)
    restrict_files("/nonexistent", Files(), required=False)  # no domain, and no error


@needs_landlock
@needs_child_python
def test_with_files_named_the_child_opens_those_and_its_work_dir_and_nothing_else(
    new_workdir: Callable[[], Path],
) -> None:
    workdir, beside = with_files(new_workdir()), with_files(new_workdir())
    result = run_confined(
        f"""\
        def read(path):
            return lambda: open(path).read()
        print(attempt(read("readable.txt")), attempt(lambda: open("new.txt", "w").close()))
        print(attempt(read({str(beside / "readable.txt")!r})))  # the child's own file, elsewhere
        print(attempt(lambda: os.listdir({str(REPO_ROOT)!r})))
        print(attempt(read({str(REPO_ROOT / "pyproject.toml")!r})))
        print(attempt(read("/proc/{os.getpid()}/environ")))  # the worker's secrets
        """,
        TEST_LIMITS,
        workdir,
        files=python_files(),
    )
    assert output_lines(result) == ["ok ok", "EACCES", "ok", "EACCES", "EACCES"]


@needs_landlock
@needs_child_python
def test_a_readable_path_cannot_be_written_and_a_writable_one_can(
    new_workdir: Callable[[], Path],
) -> None:
    workdir, shared, notes = new_workdir(), new_workdir(), with_files(new_workdir())
    result = run_confined(
        f"""\
        print(attempt(lambda: open({str(notes / "readable.txt")!r}).read()))
        print(attempt(lambda: open({str(notes / "readable.txt")!r}, "a").close()))
        print(attempt(lambda: open({str(shared / "out.txt")!r}, "w").write("hi")))
        print(attempt(lambda: os.mkdir({str(shared / "sub")!r})))
        """,
        TEST_LIMITS,
        workdir,
        files=python_files(readable=(str(notes),), writable=(str(shared),)),
    )
    assert output_lines(result) == ["ok", "EACCES", "ok", "ok"]
    assert (shared / "out.txt").read_text() == "hi"


@needs_landlock
@needs_child_python
def test_only_executable_paths_can_be_executed(new_workdir: Callable[[], Path]) -> None:
    """Both copies of `true` can be read; only the one under an executable path can run."""
    workdir, readable, runnable = new_workdir(), new_workdir(), new_workdir()
    true = shutil.which("true", path="/usr/bin:/bin")
    assert true is not None
    for folder in (readable, runnable):
        shutil.copy(true, folder / "true")
        give_to_sandbox_user(folder / "true")
    result = run_confined(
        f"""\
        for folder in [{str(readable)!r}, {str(runnable)!r}]:
            print(attempt(lambda: open(folder + "/true", "rb").read(4)),
                  attempt(lambda: subprocess.run([folder + "/true"], check=True)))
        """,
        TEST_LIMITS,
        workdir,
        files=python_files(readable=(str(readable),), executable=(str(runnable),)),
    )
    assert output_lines(result) == ["ok EACCES", "ok ok"]
