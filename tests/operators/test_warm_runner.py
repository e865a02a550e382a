"""The warm reference runner: each request in a child of its own, under the limits, sharing
nothing with the request before; a runner that died is replaced; a forked process leaves its
parent's runners alone; and `manage.py bench reference` measures what it saves."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import signal
import threading
import time
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from apps.operators.sandbox import ReferenceRunError, run_reference
from apps.operators.warmrunner import WarmRunner, pool
from tests.factories import store_every_builtin

TIMEOUT_S = 20
MEMORY_MB = 4096

# A reference whose make_inputs reports, as its error, what its process sees. It leaves a mark
# in the interpreter: the next request must not find it.
REPORTING = """
import builtins, os, resource, torch
def make_inputs(params, generator):
    seen = {"pid": os.getpid(), "sid": os.getsid(0),
            "address_space": resource.getrlimit(resource.RLIMIT_AS)[0],
            "cpu": resource.getrlimit(resource.RLIMIT_CPU)[0],
            "threads": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS"),
            "marked": hasattr(builtins, "kope_mark"), "cwd": os.getcwd()}
    builtins.kope_mark = True
    raise ValueError("SEEN" + repr(seen))
def reference(inputs, params):
    return []
"""


@pytest.fixture(autouse=True)
def warm_limits(settings: Any) -> None:
    settings.KOPE_REFERENCE_WARM = True
    settings.KOPE_REFERENCE_TIMEOUT_S = TIMEOUT_S
    settings.KOPE_REFERENCE_MEMORY_MB = MEMORY_MB


def request_for(source: str, *, threads: int = 1) -> dict[str, Any]:
    return {"kind": "kope", "source": {"reference": source}, "seed": 0, "threads": threads,
            "cases": [{"case_id": "one", "params": {}, "dtype": "float32"}]}  # fmt: skip


def what_the_reference_saw(*, threads: int = 1) -> dict[str, Any]:
    (case,) = run_reference(request_for(REPORTING, threads=threads))["cases"]
    found = re.search(r"SEEN(\{.*\})", case["error"])
    assert found, case
    seen: dict[str, Any] = eval(found.group(1))  # noqa: S307 (a dict repr this test wrote)
    return seen


def runner_pids() -> set[int]:
    return {runner.process.pid for runner in pool.idle}


def test_each_request_runs_in_a_fresh_child_of_its_own_under_the_limits() -> None:
    first = what_the_reference_saw(threads=2)
    runners = runner_pids()
    second = what_the_reference_saw()

    assert runner_pids() == runners  # the same warm runner served both
    assert first["pid"] != second["pid"] and not runners & {first["pid"], second["pid"]}
    for seen in (first, second):
        assert seen["sid"] == seen["pid"]  # a session of its own: a timeout kills its group
        assert seen["address_space"] == MEMORY_MB * 1024 * 1024
        assert seen["cpu"] == TIMEOUT_S + 1
        assert seen["marked"] is False  # nothing of the request before it
        assert os.path.basename(seen["cwd"]).startswith("kope-ref-")
    assert (first["threads"], first["omp"]) == (2, "2")
    assert (second["threads"], second["omp"]) == (1, "1")


def test_a_runner_that_died_is_replaced_and_the_request_answered() -> None:
    what_the_reference_saw()
    for runner in pool.idle:
        os.kill(runner.process.pid, signal.SIGKILL)
        runner.process.wait()
    dead = runner_pids()

    assert what_the_reference_saw()["marked"] is False
    assert runner_pids() and not runner_pids() & dead


def test_a_reference_that_kills_its_process_is_reported_and_the_runner_serves_on() -> None:
    what_the_reference_saw()
    runners = runner_pids()
    crashing = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"

    with pytest.raises(ReferenceRunError, match="killed by SIGSEGV"):
        run_reference(request_for(crashing))
    assert what_the_reference_saw()["marked"] is False
    assert runner_pids() == runners


def test_a_reference_past_its_time_is_stopped(settings: Any) -> None:
    settings.KOPE_REFERENCE_TIMEOUT_S = 2
    hanging = "import time\ntime.sleep(300)\n"

    with pytest.raises(ReferenceRunError, match="did not finish within 2 s"):
        run_reference(request_for(hanging))
    assert what_the_reference_saw()["marked"] is False


def test_a_reference_cannot_start_a_process_to_outlive_it() -> None:
    """Its own seccomp filter refuses fork and exec: nothing it starts could outlive it."""
    spawning = "import subprocess\nsubprocess.Popen(['sleep', '317'])\n"

    with pytest.raises(ReferenceRunError, match="Operation not permitted"):
        run_reference(request_for(spawning))
    assert what_the_reference_saw()["marked"] is False


def test_a_forked_process_starts_runners_of_its_own_and_leaves_its_parents_alone() -> None:
    what_the_reference_saw()
    runners = runner_pids()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (reported through the pipe)
        try:
            os.close(read_end)
            inherited = runner_pids()
            seen = what_the_reference_saw()
            os.write(write_end, json.dumps([sorted(inherited), sorted(runner_pids()),
                                            seen["marked"]]).encode())  # fmt: skip
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reply:
        inherited, own, marked = json.loads(reply.read())
    os.waitpid(child, 0)

    assert inherited == [] and own and not set(own) & runners and marked is False
    assert runner_pids() == runners
    assert what_the_reference_saw()["marked"] is False  # the parent's runner still answers


def test_a_process_forked_while_a_runner_is_written_to_does_not_wait_on_it() -> None:
    """A fork closes the child's copies of the runners' pipes (forget). On a buffered pipe
    that meant taking its lock, which the parent's thread writing at that moment held: the
    child waited forever, before it could even exec."""
    runner = WarmRunner()  # importing PyTorch: it reads nothing for a second or more
    pool.every.add(runner)
    writer = threading.Thread(target=write_quietly, args=(runner, b"x" * 10_000_000))
    writer.start()
    time.sleep(0.2)  # the writer is in the middle of its write, the pipe full
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (reported through the pipe)
        try:
            os.write(write_end, b"started")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        started = select.select([read_end], [], [], 10)[0] and os.read(read_end, 16)
        assert started == b"started", "the forked process waited on the runner's pipe"
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(read_end)
        pool.every.discard(runner)
        runner.process.kill()
        writer.join()
        runner.close()


def write_quietly(runner: WarmRunner, data: bytes) -> None:
    assert runner.process.stdin is not None
    with contextlib.suppress(OSError):  # the runner was killed first
        runner.process.stdin.write(data)


@pytest.mark.django_db
def test_the_reference_benchmark_reports_finite_positive_ratios() -> None:
    store_every_builtin()
    out = StringIO()

    call_command("bench", "reference", "--json", "--quick", stdout=out)

    report = json.loads(out.getvalue())
    (row,) = report["operators"]
    assert row["slug"] == "gemm" and report["repeats"] == 2
    for figure in (report["reference_speedup"], report["evaluation_speedup"],
                   row["fresh"]["reference_s"], row["warm"]["evaluation_s"]):  # fmt: skip
        assert math.isfinite(figure) and figure > 0
