"""`manage.py bench web`: how fast the workbench's heaviest pages answer, and how soon a live
event reaches a browser.

* forest_5000_ms: the forest page of one operator and target with 5,000 cases, as it first
  opens (roots only; the rest is drawn on demand). Extra figures: the same forest with one
  deep path opened, and with an outcome filter (which walks every match's ancestors).
* session_1000_events_ms: the session page of a session whose journal holds 1,000 events.
* event_delay_p95_ms: from an event's commit to its arrival in a websocket client connected
  to a real Daphne server (a child process), over the configured channel layer.

The first two are named after the sizes measured, in the JSON and the table alike: the
smaller --quick run (for the test that the command works) reports forest_60_ms.

Page times are server time: the whole Django request (middleware, view, queries, template)
through the test client, logged in as a member, without a network hop. Each page is asked
for WARMUP times first, then REQUESTS times; the headline is the median (a page's typical
cost; the p95 is printed next to it, and on a busy shared machine it mostly measures the
neighbours).

Everything happens in a throwaway database made for the run (migrated, then dropped with
its data even on error), because the journal refuses DELETE: a team with journal events
could never be deleted from the real one. A database left by a killed run is dropped by the
next run.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import numpy as np
import psutil
from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from psycopg import sql
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from apps.accounts.models import Membership, Team
from apps.accounts.roles import Role
from apps.benchmarks.evaluator import Benchmark, BenchmarkError, BenchOptions
from apps.devices.services import kernel_source_store
from apps.memory.journal import journal_append, journal_last_seq
from apps.operators.builtin_suite import builtin_definition, read_builtin_suite
from apps.operators.models import OperatorVersion
from apps.operators.services import version_store
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create

DATABASE_PREFIX = "kope_bench_web_"
TEAM_SLUG = "bench-web"
FOREST_OPERATOR = "gemm"
SESSION_OPERATOR = "softmax_rows"
TARGET = "cpu-c"
PER_SESSION = 250  # attempts per session in the forest: 20 sessions make 5,000 cases
EVENT_GAP_S = 0.02  # at most this long between live events, at random (no phase locking)
ARRIVAL_TIMEOUT_S = 30.0  # generous: on a loaded machine the first NOTIFY can lag
SEED = 20_260_601


@dataclass(frozen=True)
class Sizes:
    forest_cases: int
    session_events: int
    warmup: int
    requests: int
    live_events: int


FULL = Sizes(forest_cases=5_000, session_events=1_000, warmup=3, requests=20, live_events=200)
# For the test that the command works, not for measuring.
QUICK = Sizes(forest_cases=60, session_events=40, warmup=1, requests=3, live_events=5)

STRATEGIES = (
    "vectorise the inner loop with AVX2 intrinsics",
    "tile the loops for the L1 and L2 caches",
    "unroll the reduction by four with independent accumulators",
    "parallelise the outer loop with OpenMP",
    "transpose an operand so the inner loop reads contiguously",
    "prefetch the next block and align the stores",
    "pack the B panel into a contiguous buffer",
    "interchange the j and k loops",
)
FAILURES = (("compile_error", 0.12), ("incorrect", 0.12), ("crashed", 0.03), ("timed_out", 0.03))


# --- the benchmark ---------------------------------------------------------------------------


def web_benchmark(options: BenchOptions) -> dict[str, Any]:
    sizes = QUICK if options.quick else FULL
    started = time.monotonic()
    with throwaway_database(options.progress) as database:
        client, member = member_client()
        team = member.team
        options.progress(f"recording a forest of {sizes.forest_cases:,} cases")
        forest = seed_forest(team, sizes.forest_cases, random.Random(SEED))  # noqa: S311 (synthetic)
        options.progress(f"recording a session of {sizes.session_events:,} events")
        session = seed_session(team, sizes.session_events)
        options.progress(f"asking for each page {sizes.warmup} + {sizes.requests} times")
        report = page_figures(client, team, forest, session, sizes)
        options.progress(f"starting Daphne and sending {sizes.live_events} live events")
        report |= delay_figures(client, team, sizes.live_events, database)
    return report | {
        "forest_cases": sizes.forest_cases,
        "session_events": sizes.session_events,
        "requests": sizes.requests,
        "live_events": sizes.live_events,
        "channel_layer": str(settings.CHANNEL_LAYERS["default"]["BACKEND"]).rsplit(".", 1)[-1],
        "debug": settings.DEBUG,
        "database": database,
        "wall_s": time.monotonic() - started,
    }


# --- a database of its own -------------------------------------------------------------------


@contextmanager
def throwaway_database(progress: Callable[[str], None]) -> Iterator[str]:
    """A new, migrated database in place of the default one, dropped afterwards; the channel
    layer is made again for it (the PostgreSQL layer keeps its messages there)."""
    drop_abandoned_databases()
    name = f"{DATABASE_PREFIX}{os.getpid()}_{time.time_ns()}"
    original = connection.settings_dict["NAME"]
    progress(f"creating and migrating the database {name}")
    with connection._nodb_cursor() as cursor:
        cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    layer = channel_layers.backends.get(DEFAULT_CHANNEL_LAYER)
    try:
        use_database(name)
        call_command("migrate", verbosity=0, interactive=False)
        channel_layers.set(
            DEFAULT_CHANNEL_LAYER, channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        )
        yield name
    finally:
        channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
        if layer is not None:
            channel_layers.set(DEFAULT_CHANNEL_LAYER, layer)
        use_database(original)
        drop_database(name)


def use_database(name: str) -> None:
    connection.close()
    connection.settings_dict["NAME"] = name
    settings.DATABASES[connection.alias]["NAME"] = name


def drop_database(name: str) -> None:
    with connection._nodb_cursor() as cursor:
        cursor.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def drop_abandoned_databases() -> None:
    """Databases of earlier runs whose process is gone (killed before it could clean up)."""
    with connection._nodb_cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                       [f"{DATABASE_PREFIX}%"])  # fmt: skip
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        pid = name.removeprefix(DATABASE_PREFIX).split("_")[0]
        if not (pid.isdigit() and psutil.pid_exists(int(pid))):
            drop_database(name)


# --- the data --------------------------------------------------------------------------------


def member_client() -> tuple[Client, Membership]:
    team = Team.objects.create(name="Bench web", slug=TEAM_SLUG)
    user = User.objects.create_user(username="bench-web", password=None)
    membership = Membership.objects.create(user=user, team=team, role=Role.ENGINEER)
    client = Client(SERVER_NAME=allowed_host())
    client.force_login(user)
    return client, membership


def allowed_host() -> str:
    """A host name the settings accept (the test client's 'testserver' is only for tests)."""
    return next((h for h in settings.ALLOWED_HOSTS if h and h[0] not in "*."), "localhost")


def stored_operator(slug: str) -> OperatorVersion:
    """A built-in operator stored without running its PyTorch reference: the benchmark never
    evaluates anything, so each case's declared shapes stand in for the reference's."""
    folder = next(f for f in read_builtin_suite() if f.spec.slug == slug)
    outcomes = [
        {side: [{"shape": t.resolved_shape(case.params), "dtype": t.resolved_dtype(case.dtype)}
                for t in tensors]
         for side, tensors in (("inputs", folder.spec.inputs), ("outputs", folder.spec.outputs))}
        for case in folder.spec.cases
    ]  # fmt: skip
    return version_store(team=None, definition=builtin_definition(folder), outcomes=outcomes,
                         created_by=None)[0]  # fmt: skip


@dataclass(frozen=True)
class Forest:
    deepest_path: list[int]  # case ids from a root to the deepest case of the first session


@dataclass
class Attempt:
    parent: int | None  # index into the session's attempts
    outcome: str
    latency_ms: float | None
    depth: int


def seed_forest(team: Team, cases: int, rng: random.Random) -> Forest:
    """Sessions of PER_SESSION attempts each, all on one operator and target: each starts from
    the naive kernel (a root) and mostly builds on its incumbent, sometimes on an older
    correct attempt (a new branch); about three in ten attempts fail."""
    version = stored_operator(FOREST_OPERATOR)
    sources = [kernel_source_store(f"/* variant {n} */\nint kope_kernel;\n").sha256
               for n in range(40)]  # fmt: skip
    path: list[int] = []
    for first in range(0, cases, PER_SESSION):
        session = OptimizationSession.objects.create(team=team, target=TARGET, memory_mode="off",
                                                     label="bench web forest")  # fmt: skip
        attempts = session_attempts(min(PER_SESSION, cases - first), rng)
        with transaction.atomic():  # one commit per session: seeding, not what is measured
            ids = record_attempts(session.pk, version.pk, attempts, sources, rng)
        if not path:
            path = path_to_deepest(attempts, ids)
    return Forest(deepest_path=path)


def session_attempts(count: int, rng: random.Random) -> list[Attempt]:
    attempts = [Attempt(parent=None, outcome="no_change", latency_ms=rng.uniform(5, 50), depth=0)]
    incumbent = 0
    for _ in range(1, count):
        correct = [i for i, a in enumerate(attempts) if a.latency_ms is not None]
        parent = incumbent if rng.random() < 0.7 else rng.choice(correct)
        base = attempts[parent].latency_ms or 1.0
        outcome, latency = attempt_outcome(base, rng)
        attempts.append(Attempt(parent, outcome, latency, attempts[parent].depth + 1))
        best = attempts[incumbent].latency_ms or 0.0
        if latency is not None and latency < best:
            incumbent = len(attempts) - 1
    return attempts


def attempt_outcome(parent_ms: float, rng: random.Random) -> tuple[str, float | None]:
    draw = rng.random()
    for outcome, share in FAILURES:
        if draw < share:
            return outcome, None
        draw -= share
    latency = parent_ms * rng.lognormvariate(-0.03, 0.12)
    ratio = latency / parent_ms
    return ("improved" if ratio < 0.98 else "regressed" if ratio > 1.02 else "no_change"), latency


def record_attempts(
    session_id: int, version_id: int, attempts: list[Attempt], sources: list[str],
    rng: random.Random,
) -> list[int]:  # fmt: skip
    ids: list[int] = []
    reference_ms = (attempts[0].latency_ms or 1.0) * 0.3
    for iteration, attempt in enumerate(attempts):
        parent = ids[attempt.parent] if attempt.parent is not None else None
        latency = attempt.latency_ms
        event = journal_append(session_id=session_id, kind="case_recorded", payload={
            "iteration": iteration, "version_id": version_id, "target": TARGET,
            "strategy": "starting kernel" if parent is None else rng.choice(STRATEGIES),
            "outcome": attempt.outcome, "correct": latency is not None, "parent_case_id": parent,
            "source_sha256": rng.choice(sources), "latency_ms": latency,
            "speedup_vs_reference": reference_ms / latency if latency else None,
            "validation": {"cases": [{"case": "odd_tail", "passed": latency is not None,
                                      "max_rel_error": 3e-7 if latency else 0.4}]},
            "feedback": {"compiler": "" if attempt.outcome != "compile_error" else
                         "kernel.c:12: error: expected ';' before '}' token"},
        })  # fmt: skip
        ids.append(event.pk)
    return ids


def path_to_deepest(attempts: list[Attempt], ids: list[int]) -> list[int]:
    index: int | None = max(range(len(attempts)), key=lambda i: attempts[i].depth)
    path = []
    while index is not None:
        path.append(ids[index])
        index = attempts[index].parent
    return path[::-1]


def seed_session(team: Team, events: int) -> OptimizationSession:
    """One operator's loop as the journal records it: per iteration the context, the model
    call, the candidate, three evaluation steps and the case, and a new incumbent when faster."""
    version = stored_operator(SESSION_OPERATOR)
    session = session_create(team=team, user=None, operators=[SESSION_OPERATOR],
                             memory_mode="off", start=False, label="bench web session")  # fmt: skip
    source = kernel_source_store(SOFTMAX_KERNEL)
    state = {"incumbent": None, "best_ms": 10.0}
    with transaction.atomic():
        iteration = 0
        while session_length(session.pk) < events:
            for kind, payload in iteration_events(version, source.sha256, iteration, state):
                if session_length(session.pk) >= events:
                    break
                event = journal_append(session_id=session.pk, kind=kind, payload=payload)
                if kind == "case_recorded":
                    state["case"] = event.pk
            iteration += 1
    session.refresh_from_db()
    return session


def session_length(session_id: int) -> int:
    return journal_last_seq(session_id)


def iteration_events(
    version: OperatorVersion, sha256: str, iteration: int, state: dict[str, Any]
) -> Iterator[tuple[str, dict[str, Any]]]:
    op = SESSION_OPERATOR
    latency = 10.0 / (1 + 0.05 * iteration) * (1.15 if iteration % 3 == 2 else 1.0)
    parent = state.get("case")
    yield "iteration_started", {"operator": op, "iteration": iteration, "stage": "optimization",
                                "rounds_left": 1000 - iteration}  # fmt: skip
    yield "context_assembled", {
        "operator": op, "iteration": iteration, "tokens": 11_800, "budget": 16_000,
        "tokens_per_tier": {"hot": 6_100, "warm": 3_900, "cold": 1_800},
        "admitted": [f"case:{n}" for n in range(8)], "shortened": ["incumbent"], "cut": [],
        "retrieved": [{"key": f"case:{n}", "kind": "case", "operator": op,
                       "similarity": 0.8 - n / 50, "value": 0.1} for n in range(8)],
        "hot_rules": ["Index tensors with int64_t; never int."],
    }  # fmt: skip
    yield "model_called", {"operator": op, "iteration": iteration, "model": "offline",
                           "usage": {"input_tokens": 11_800, "output_tokens": 900}}  # fmt: skip
    strategy = STRATEGIES[iteration % len(STRATEGIES)]
    yield "candidate_proposed", {"operator": op, "iteration": iteration, "strategy": strategy,
                                 "source_sha256": sha256, "parent_case_id": parent,
                                 "rationale": "the scalar tail dominates the profile"}  # fmt: skip
    for step in ("compiled", "case_results", "timed"):
        yield step, {"operator": op, "iteration": iteration, "evaluation_id": iteration,
                     "ok": True, "detail": {"seconds": 0.4}}  # fmt: skip
    yield "case_recorded", {
        "iteration": iteration, "version_id": version.pk, "target": TARGET, "strategy": strategy,
        "outcome": "improved" if latency < state["best_ms"] else "regressed", "correct": True,
        "parent_case_id": parent, "source_sha256": sha256, "latency_ms": latency,
        "speedup_vs_reference": 3.0 / latency,
    }  # fmt: skip
    if latency < state["best_ms"]:
        yield "incumbent_replaced", {"operator": op, "iteration": iteration,
                                     "case_id": state["case"], "previous_case_id": parent,
                                     "latency_ms": latency,
                                     "previous_latency_ms": state["best_ms"]}  # fmt: skip
        state["best_ms"] = latency


SOFTMAX_KERNEL = """#include <math.h>
#include "kope_kernel.h"

/* softmax along rows: running max, one pass for the sum, one to scale */
int kope_kernel(const kope_tensor *inputs, int32_t n_inputs, kope_tensor *outputs,
                int32_t n_outputs, const double *attrs, int32_t n_attrs) {
    const float *x = (const float *)inputs[0].data;
    float *y = (float *)outputs[0].data;
    int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
    for (int64_t r = 0; r < rows; ++r) {
        float max = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) max = fmaxf(max, x[r * cols + c]);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) sum += (y[r * cols + c] = expf(x[r * cols + c] - max));
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] /= (float)sum;
    }
    return 0;
}
"""


# --- the pages -------------------------------------------------------------------------------


def page_figures(
    client: Client, team: Team, forest: Forest, session: OptimizationSession, sizes: Sizes
) -> dict[str, Any]:
    forest_url = f"/t/{team.slug}/forest/?" + urlencode({"operator": FOREST_OPERATOR,
                                                           "target": TARGET})  # fmt: skip
    opened = ",".join(map(str, forest.deepest_path))
    pages = {
        "forest": forest_url,
        "forest_opened": f"{forest_url}&{urlencode({'open': opened})}",
        "forest_filtered": f"{forest_url}&outcome=incorrect",
        "session": f"/t/{team.slug}/sessions/{session.pk}/",
    }
    figures: dict[str, Any] = {"opened_depth": len(forest.deepest_path)}
    for name, url in pages.items():
        times, queries = page_times(client, url, sizes)
        figures |= {f"{name}_p50_ms": percentile(times, 50), f"{name}_p95_ms":
                    percentile(times, 95), f"{name}_queries": queries}  # fmt: skip
    forest_key, session_key = headline_keys(sizes.forest_cases, sizes.session_events)
    return {forest_key: figures["forest_p50_ms"], session_key: figures["session_p50_ms"]} | figures


def headline_keys(forest_cases: int, session_events: int) -> tuple[str, str]:
    """The two page headlines' names, after the sizes measured: forest_5000_ms and
    session_1000_events_ms at full size; the table's last line names the same."""
    return f"forest_{forest_cases}_ms", f"session_{session_events}_events_ms"


def page_times(client: Client, url: str, sizes: Sizes) -> tuple[list[float], int]:
    """Milliseconds per request after the warm-up, and the queries one request makes."""
    queries = query_count(lambda: page(client, url))
    for _ in range(sizes.warmup - 1):
        page(client, url)
    times = []
    for _ in range(sizes.requests):
        started = time.perf_counter()
        page(client, url)
        times.append((time.perf_counter() - started) * 1000)
    return times, queries


def query_count(action: Callable[[], None]) -> int:
    """The queries an action makes (counted as they run: DEBUG's query log is capped)."""
    count = 0

    def counted(execute: Callable[..., Any], *args: Any) -> Any:
        nonlocal count
        count += 1
        return execute(*args)

    with connection.execute_wrapper(counted):
        action()
    return count


def page(client: Client, url: str) -> None:
    response = client.get(url)
    if response.status_code != 200:
        raise BenchmarkError(f"GET {url} answered {response.status_code}")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


# --- live events -----------------------------------------------------------------------------


def delay_figures(client: Client, team: Team, count: int, database: str) -> dict[str, Any]:
    session = session_create(team=team, user=None, operators=[SESSION_OPERATOR],
                             memory_mode="off", start=False, label="bench web live")  # fmt: skip
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    with daphne(server_env(database)) as url:
        ws_url = f"{url.replace('http', 'ws', 1)}/ws/sessions/{session.pk}/?after=0"
        headers = {"Cookie": cookie}
        with connect(ws_url, additional_headers=headers, origin=Origin(url)) as websocket:
            rng = random.Random(SEED)  # noqa: S311 (gaps between events, not secrets)
            delays = live_delays(websocket, session.pk, count, rng)
    return {
        "event_delay_p50_ms": percentile(delays, 50),
        "event_delay_p95_ms": percentile(delays, 95),
        "event_delay_max_ms": max(delays),
    }


def live_delays(websocket: ClientConnection, session_id: int, count: int,
                rng: random.Random) -> list[float]:  # fmt: skip
    """Append events one at a time, each after the last arrived, and time commit -> arrival
    (both clocks are this process's: a thread stamps each message as it comes)."""
    arrivals: dict[int, float] = {}
    arrived = threading.Condition()
    threading.Thread(target=receive, args=(websocket, arrivals, arrived), daemon=True).start()
    delays = []
    for n in range(count):
        seq, committed_at = append_and_commit(session_id, n)
        with arrived:
            if not arrived.wait_for(functools.partial(operator.contains, arrivals, seq),
                                    timeout=ARRIVAL_TIMEOUT_S):  # fmt: skip
                raise BenchmarkError(f"event {seq} never reached the websocket")
        delays.append((arrivals[seq] - committed_at) * 1000)
        time.sleep(rng.uniform(0, EVENT_GAP_S))
    return delays


def receive(websocket: ClientConnection, arrivals: dict[int, float],
            arrived: threading.Condition) -> None:  # fmt: skip
    for message in websocket:
        at = time.perf_counter()
        with arrived:
            arrivals[json.loads(message)["seq"]] = at
            arrived.notify_all()


def append_and_commit(session_id: int, n: int) -> tuple[int, float]:
    """An event appended as the loop does; the time is taken by the first on-commit hook,
    before the journal's own (which publishes the event)."""
    committed: list[float] = []
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(time.perf_counter()))
        event = journal_append(session_id=session_id, kind="tool_called", payload={
            "operator": SESSION_OPERATOR, "iteration": n, "tool": "perf",
            "summary": f"perf stat: {n} cycles in the inner loop"})  # fmt: skip
    return event.seq, committed[0]


def server_env(database: str) -> dict[str, str]:
    """This process's environment, with the throwaway database for the server."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DATABASE_URL_FILE"}}
    if settings.EMBEDDED_DATABASE:
        env["KOPE_DB_NAME"] = database
    else:
        env["DATABASE_URL"] = database_url(connection.settings_dict)
    return env


def database_url(db: dict[str, Any]) -> str:
    options = {k: str(v) for k, v in db.get("OPTIONS", {}).items()}
    host = str(db.get("HOST") or "")
    if host.startswith("/"):  # a socket folder goes in the query, as the settings read it
        options["host"], host = host, ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    user = f"{quote(db.get('USER') or '', safe='')}:{quote(db.get('PASSWORD') or '', safe='')}"
    query = f"?{urlencode(options)}" if options else ""
    return f"postgresql://{user}@{host}{port}/{quote(db['NAME'], safe='')}{query}"


@contextmanager
def daphne(env: dict[str, str]) -> Iterator[str]:
    """Daphne on a free loopback port, in its own process group; always stopped."""
    port = free_port()
    log = open(os.devnull, "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "kope_web.asgi:application"],
        cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_answering(f"{url}/accounts/login/", process)
        yield url
    finally:
        stop(process)
        log.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answering(url: str, process: subprocess.Popen[Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if answers(url):
            return
        time.sleep(0.1)
    raise BenchmarkError(f"Daphne never answered at {url} (exit code {process.poll()})")


def answers(url: str) -> bool:
    """Whether a server answers at `url` with anything at all, an error status included."""
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (loopback only)
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# --- the plain report ------------------------------------------------------------------------


def web_table(report: dict[str, Any]) -> str:
    def row(label: str, name: str, aim: str, note: str) -> str:
        return (f"{label:<34}{report[f'{name}_p50_ms']:>9.1f}{report[f'{name}_p95_ms']:>9.1f}"
                f"{report.get(f'{name}_queries', ''):>9}{aim:>8}  {note}")  # fmt: skip

    forest, events = f"{report['forest_cases']:,}", f"{report['session_events']:,}"
    forest_key, session_key = headline_keys(report["forest_cases"], report["session_events"])
    return "\n".join([
        f"Web benchmark: server time over {report['requests']} requests per page after a "
        f"warm-up (DEBUG={report['debug']}), and {report['live_events']} live events through "
        f"Daphne and the {report['channel_layer']}",
        "",
        f"{'':<34}{'p50 ms':>9}{'p95 ms':>9}{'queries':>9}{'aim':>8}",
        row(f"forest page, {forest} cases", "forest", "300", "(roots; the rest on demand)"),
        row("  with a deep path opened", "forest_opened", "",
            f"({report['opened_depth']} levels)"),
        row("  filtered to incorrect", "forest_filtered", "", "(matches and their ancestors)"),
        row(f"session page, {events} events", "session", "300", ""),
        row("event delay, commit -> websocket", "event_delay", "250",
            f"(p95 is the aim; max {report['event_delay_max_ms']:.1f} ms)"),
        "",
        f"{forest_key} {report[forest_key]:.1f}  {session_key} {report[session_key]:.1f}  "
        f"(medians)  event_delay_p95_ms {report['event_delay_p95_ms']:.1f}",
    ])  # fmt: skip


WEB_BENCHMARK = Benchmark(run=web_benchmark, render=web_table)
