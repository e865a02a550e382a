"""`make load`: the workbench under a team's load, on loopback, in a throwaway data folder.

    .venv/bin/python -m loadtest.run [--profiles base,double] [--seconds 75] [--report FILE]

It starts the single-machine stack (embedded PostgreSQL, Daphne, an agent worker with two
processes and a device worker with one) with KOPE_DATA_DIR in a new folder under /tmp (never
var/), seeds a team (20 viewers, reviewers with 30 pending rules each, 5 offline sessions on
small operators that keep the workers busy), waits until the sessions have recorded a few
cases, then runs each profile with locust, headless and bounded in time, and prints its
summary: latency percentiles per request, errors, event delivery delay, whether the aims were
met, and where the CPU and the database connections went. It exits non-zero only when the
harness itself fails, not when an aim is missed.

The workers run apart, as `make run` starts them, because an agent task waits for its
evaluation: one worker with two processes on both queues stalls once two sessions run at once.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import io
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Profile:
    watchers: int
    browsers: int
    reviewers: int

    @property
    def users(self) -> dict[str, int]:
        return {"watchers": self.watchers, "browsers": self.browsers, "reviewers": self.reviewers}

    @property
    def total(self) -> int:
        return self.watchers + self.browsers + self.reviewers


PROFILES = {
    "base": Profile(watchers=50, browsers=20, reviewers=5),
    "double": Profile(watchers=100, browsers=40, reviewers=10),
    "tiny": Profile(watchers=1, browsers=1, reviewers=1),  # the harness's own test
}
SESSIONS, VIEWERS, RULES_PER_REVIEWER = 5, 20, 30
RAMP_S = 10  # every profile starts all its users over this many seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="base,double")
    parser.add_argument("--seconds", type=at_least_one, default=75, help="length of each profile")
    parser.add_argument(
        "--rounds", type=at_least_one, default=12, help="rounds per operator per session"
    )
    parser.add_argument("--report", type=report_file, help="also write the summaries here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the data folder and logs")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.profiles.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROFILES]
    if unknown or not names:
        parser.error(f"profiles are {', '.join(PROFILES)}; got {args.profiles!r}")
    data_dir = Path(tempfile.mkdtemp(prefix="kope-load-", dir="/tmp"))
    if args.keep:
        atexit.register(print, f"data and logs kept in {data_dir}")
    else:  # registered first, so it runs last: after the embedded server's own exit handler
        atexit.register(remove_data_dir, data_dir)
    prepare_environment(data_dir)
    summaries = run(data_dir, names, args.seconds, args.rounds)
    if args.report:
        args.report.write_text(json.dumps([asdict(s) for s in summaries], indent=1))
    return 0


def at_least_one(text: str) -> int:
    """A length or count: locust reads `-t 0s` as no time limit at all."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of 1 or more, got {text!r}")
    return value


def report_file(text: str) -> Path:
    """Checked before the run, not when the run is over and its figures are to be written."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{path.parent} is not a folder")
    return path


def remove_data_dir(data_dir: Path) -> None:
    """Stop the embedded server if it outlived us (a worker process still listed as its user
    keeps it up), then remove the folder."""
    import psutil

    pid_file = data_dir / "pgdata" / "postmaster.pid"
    if pid_file.exists():
        try:
            server = psutil.Process(int(pid_file.read_text().split()[0]))
            if server.name() == "postgres":
                server.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
                server.wait(timeout=15)
        except (psutil.Error, ValueError, IndexError):
            pass
    shutil.rmtree(data_dir, ignore_errors=True)


def prepare_environment(data_dir: Path) -> None:
    """Single-machine mode in data_dir; children inherit it. DEBUG off, as in production."""
    for name in ("DATABASE_URL", "REDIS_URL", "KOPE_DB_NAME"):
        os.environ.pop(name, None)
    os.environ.update(
        KOPE_DATA_DIR=str(data_dir),
        DJANGO_SETTINGS_MODULE="kope_web.settings.local",
        DJANGO_DEBUG="false",
        KOPE_ADMIN_PASSWORD=secrets.token_urlsafe(16),
        KOPE_LOG_LEVEL="WARNING",
    )


def run(data_dir: Path, names: list[str], seconds: int, rounds: int) -> list[Any]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from apps.workbench.management.commands.runstack import stop_all, stop_like_ctrl_c
    from loadtest import seed

    # As Ctrl-C: without it, SIGTERM (`timeout make load`, a cancelled job) would end the run
    # with no cleanup, leaving the embedded PostgreSQL, locust and the data folder behind.
    signal.signal(signal.SIGTERM, stop_like_ctrl_c)

    say(f"Starting the database and seeding a team in {data_dir}…")
    call_command("bootstrap", stdout=io.StringIO())
    reviewers = max(PROFILES[n].reviewers for n in names)
    plan = seed.seed_team(
        viewers=VIEWERS,
        reviewers=reviewers,
        sessions=SESSIONS,
        rounds=rounds,
        rules=reviewers * RULES_PER_REVIEWER,
    )
    (data_dir / "plan.json").write_text(json.dumps(plan))
    url = f"http://127.0.0.1:{free_port()}"
    children = start_stack(data_dir, url)
    try:
        wait_for_stack(url, children, data_dir)
        warm_up(url, plan, minimum_cases=0 if names == ["tiny"] else SESSIONS * 2)
        stack = {name: child.pid for name, child in children.items()}
        return [run_profile(data_dir, n, PROFILES[n], seconds, url, stack) for n in names]
    finally:
        stop_all(list(children.values()))
        connection.close()


def start_stack(data_dir: Path, url: str) -> dict[str, subprocess.Popen[bytes]]:
    """Daphne, and the agent and device workers apart, as on many hosts (see docs/many-hosts.md)."""
    port = url.rsplit(":", 1)[1]
    daphne = ["-m", "daphne", "-b", "127.0.0.1", "-p", port, "kope_web.asgi:application"]
    return {
        "web": spawn(data_dir, "web", daphne),
        "agent worker": spawn(data_dir, "agent", worker_args("agent", 2)),
        "device worker": spawn(data_dir, "device", worker_args("device.cpu", 1)),
    }


def wait_for_stack(url: str, children: dict[str, subprocess.Popen[bytes]], data_dir: Path) -> None:
    """Until the web server answers; else what stopped and the ends of the logs, which are in
    data_dir, removed as the run exits."""
    from django.core.management.base import CommandError

    from apps.workbench.management.commands.runstack import wait_until_answering

    try:
        wait_until_answering(f"{url}/accounts/login/", list(children.values()))
    except CommandError:
        stopped = [
            f"the {name} stopped (exit code {child.returncode})"
            for name, child in children.items()
            if child.poll() is not None
        ]
        logs = [f"--- {log.name} ends:\n{log_tail(log)}" for log in sorted(data_dir.glob("*.log"))]
        reason = "; ".join(stopped) or f"{url} did not answer"
        raise SystemExit("\n".join([f"The stack did not start: {reason}.", *logs])) from None


def log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def say(message: str) -> None:
    print(message, flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def worker_args(queues: str, concurrency: int) -> list[str]:
    return [
        "-m",
        "celery",
        "-A",
        "kope_web",
        "worker",
        "-Q",
        queues,
        "--concurrency",
        str(concurrency),
        "--hostname",
        f"{queues}@%h",
        "--loglevel",
        "WARNING",
    ]


def spawn(data_dir: Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    from apps.core.parent_death import die_with_parent

    log = (data_dir / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, *args],
        env={**os.environ, "PGAPPNAME": f"kope-{name}"},
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=functools.partial(die_with_parent, os.getpid(), signal.SIGTERM),
        start_new_session=True,
    )


def warm_up(url: str, plan: dict[str, Any], minimum_cases: int) -> None:
    """Wait for the sessions to record some cases to browse (at most two minutes), then load
    each page once, so the first search does not pay for loading the embedding model."""
    from apps.memory.models import Case

    deadline = time.monotonic() + 120
    while Case.objects.count() < minimum_cases and time.monotonic() < deadline:
        time.sleep(1)
    say(f"Workers running: {Case.objects.count()} cases recorded so far.")
    team, cookie = plan["team"], plan["viewers"][0]
    for path in ("forest/", "knowledge/?q=loop", "sessions/", "review/", "hot-memory/"):
        request = urllib.request.Request(  # noqa: S310 (loopback only)
            f"{url}/t/{team}/{path}",
            headers={"Cookie": f"sessionid={cookie}"},
        )
        with urllib.request.urlopen(request, timeout=60):  # noqa: S310 (loopback only)
            pass


def run_profile(
    data_dir: Path, name: str, profile: Profile, seconds: int, url: str, stack: dict[str, int]
) -> Any:
    from loadtest.summary import render, summarize

    say(f"\nRunning profile {name} for {seconds} s ({profile.total} users)…")
    samples = data_dir / f"samples-{name}.json"
    counts = {"LOAD_WATCHERS": profile.watchers, "LOAD_BROWSERS": profile.browsers,
              "LOAD_REVIEWERS": profile.reviewers}  # fmt: skip
    env = {**os.environ, **{k: str(v) for k, v in counts.items()},
           "LOAD_PLAN": str(data_dir / "plan.json"), "LOAD_SAMPLES": str(samples)}  # fmt: skip
    args = ["-f", str(ROOT / "loadtest" / "locustfile.py"), "--headless", "--only-summary",
            "-u", str(profile.total), "-r", str(max(1, profile.total // RAMP_S)),
            "-t", f"{seconds}s", "--host", url, "--stop-timeout", "5",
            "--loglevel", "WARNING"]  # fmt: skip
    with (data_dir / f"locust-{name}.log").open("wb") as log:
        locust = subprocess.Popen([sys.executable, "-m", "locust", *args], cwd=ROOT, env=env,
                                  stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        # From here locust is ours to end: a SIGTERM (raised here as KeyboardInterrupt) while
        # Usage read its first figures left it running, orphaned.
        try:
            usage, before = Usage(stack), resource.getrusage(resource.RUSAGE_CHILDREN)
            locust.wait(timeout=seconds + 120)
        finally:
            if locust.poll() is None:  # the run was stopped, or locust outlived its time
                locust.kill()
                locust.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # only locust ended meanwhile
    locust_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if not samples.exists():
        ends = log_tail(data_dir / f"locust-{name}.log")
        raise SystemExit(f"locust wrote no samples; its output ends:\n{ends}")
    summary = summarize(name, profile.users, seconds, json.loads(samples.read_text()))
    say(render(summary))
    say(usage.report(locust_cpu))
    return summary


class Usage:
    """Over one profile: CPU of the machine and of each process (with its children), the most
    database connections open at once, and what the workers wrote; to tell where it bends."""

    def __init__(self, pids: dict[str, int]) -> None:
        import psutil

        self.names = list(pids)
        self.processes = [psutil.Process(pid) for pid in pids.values()]
        self.cpu = [self._cpu(p) for p in self.processes]
        psutil.cpu_percent(interval=None)
        self.started = time.monotonic()
        self.events, self.cases = self._written()
        self.most_connections, self.connections_by = 0, ""
        self.sampling = threading.Event()
        self.sampler = threading.Thread(target=self._sample_connections, daemon=True)
        self.sampler.start()

    @staticmethod
    def _cpu(process: Any) -> float:
        try:
            children = process.children(recursive=True)
            times = [process.cpu_times()] + [c.cpu_times() for c in children]
        except Exception:  # a child that ended between the listing and the reading
            return 0.0
        return float(sum(t.user + t.system for t in times))

    @staticmethod
    def _written() -> tuple[int, int]:
        from apps.memory.models import Case, JournalEvent

        return JournalEvent.objects.count(), Case.objects.count()

    def _sample_connections(self) -> None:
        from django.db import connection

        while not self.sampling.wait(0.5):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT application_name, state, count(*) FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' GROUP BY 1, 2 ORDER BY 3 DESC"
                )
                rows = cursor.fetchall()
            if sum(n for _, _, n in rows) > self.most_connections:
                self.most_connections = sum(n for _, _, n in rows)
                self.connections_by = ", ".join(f"{n} {a or '?'} {s}" for a, s, n in rows)
        connection.close()

    def report(self, locust_cpu_s: float) -> str:
        import psutil

        self.sampling.set()
        self.sampler.join()
        elapsed = time.monotonic() - self.started
        machine = psutil.cpu_percent(interval=None)
        shares = [
            (self._cpu(p) - before) / elapsed * 100
            for p, before in zip(self.processes, self.cpu, strict=True)
        ]
        shares.append(locust_cpu_s / elapsed * 100)
        names = ", ".join(
            f"{n} {share:.0f}%" for n, share in zip([*self.names, "locust"], shares, strict=True)
        )
        events, cases = (
            now - before
            for now, before in zip(self._written(), (self.events, self.cases), strict=True)
        )
        return (
            f"cpu: machine {machine:.0f}% of {psutil.cpu_count()} cores; {names} "
            f"(of one core; not counted: PostgreSQL, processes that ended meanwhile such as "
            f"compilers and sandboxed runs, and other work on the machine)\n"
            f"database connections: at most {self.most_connections} open "
            f"({self.connections_by})\n"
            f"workers meanwhile: {events} journal events, {cases} cases"
        )


if __name__ == "__main__":
    sys.exit(main())
