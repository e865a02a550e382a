"""Start-up with bad configuration: a message naming the problem and a hint, no traceback."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from kope_web import embedded_db
from tests.processes import as_a_terminal_starts_it

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KOPE_PORT", "abc", "KOPE_PORT='abc' is not an integer"),
        ("DATABASE_URL", "mysql://db/kope", "DATABASE_URL must start with postgresql://"),
        ("REDIS_URL", "localhost:6379", "REDIS_URL must start with redis://"),
        ("DJANGO_DEBUG", "sometimes", "DJANGO_DEBUG='sometimes' is not a boolean"),
        # Used only with REDIS_URL, and reported without it: not first on the day Redis comes.
        ("KOPE_REDIS_TIMEOUT", "0", "KOPE_REDIS_TIMEOUT=0 is outside 1..600"),
        # The target's name, not its queue's: a device worker would wait on device.cpu-c,
        # which nothing is sent to, and no evaluation would ever run.
        ("KOPE_DEVICE_TARGETS", "cpu-c", "KOPE_DEVICE_TARGETS='cpu-c' is not a comma list of"),
        ("KOPE_DEVICE_TARGETS", ",", "KOPE_DEVICE_TARGETS=',' is not a comma list of cpu, cuda"),
    ],
)
def test_a_malformed_variable_stops_start_up_naming_it(variable, value, message) -> None:
    result = manage("check", **{variable: value})
    assert result.returncode == 2
    assert f"Configuration error: {message}" in result.stderr
    assert "Traceback" not in result.stderr


def test_production_refuses_to_start_without_a_secret_key() -> None:
    result = manage(
        "check", DJANGO_SETTINGS_MODULE="kope_web.settings.production", DJANGO_SECRET_KEY=""
    )
    assert result.returncode == 2
    assert "DJANGO_SECRET_KEY" in result.stderr and "Traceback" not in result.stderr


def test_production_settings_pass_the_deploy_check() -> None:
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_SETTINGS_MODULE="kope_web.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(60),
        DATABASE_URL="postgresql://kope@db.invalid/kope",
        DJANGO_ALLOWED_HOSTS="kope.example.org",
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_a_data_dir_from_another_postgres_version_gets_a_hint() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="kv", dir="/tmp"))
    (data_dir / "pgdata").mkdir()
    (data_dir / "pgdata" / "PG_VERSION").write_text("12\n")
    result = manage(
        "migrate", KOPE_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="kope_web.settings.local"
    )
    assert result.returncode == 2
    assert "made by PostgreSQL 12" in result.stderr
    assert "Hint: dump it with PostgreSQL 12's pg_dump" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_port_in_use_gets_a_hint_to_pick_another() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = manage(
            "runstack", "--port", str(port), DJANGO_SETTINGS_MODULE="kope_web.settings.local"
        )
    assert result.returncode != 0
    assert f"Port {port} on 127.0.0.1 is already in use" in result.stderr
    assert f"KOPE_PORT={port + 1} make run" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_stale_lock_file_from_a_dead_server_is_removed(tmp_path: Path) -> None:
    lock = tmp_path / "postmaster.pid"
    lock.write_text(f"{os.getpid()}\n{tmp_path}\n")  # a live pid, but not a postgres
    embedded_db.remove_stale_lock(tmp_path)
    assert not lock.exists()


def test_a_garbled_lock_file_is_removed(tmp_path: Path) -> None:
    (tmp_path / "postmaster.pid").write_text("not a pid")
    embedded_db.remove_stale_lock(tmp_path)
    assert not (tmp_path / "postmaster.pid").exists()


def test_handles_of_killed_processes_are_forgotten(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".handle_pids.json").write_text(f"[{os.getpid()}, {dead.pid}]")
    embedded_db.forget_dead_handles(tmp_path)
    assert (tmp_path / ".handle_pids.json").read_text() == f"[{os.getpid()}]"


def test_a_user_that_exited_but_was_not_collected_is_forgotten(tmp_path: Path) -> None:
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until_zombie(zombie.pid)
    (tmp_path / ".handle_pids.json").write_text(f"[{os.getpid()}, {zombie.pid}]")
    embedded_db.forget_dead_handles(tmp_path)
    assert (tmp_path / ".handle_pids.json").read_text() == f"[{os.getpid()}]"
    zombie.wait()


def test_the_other_live_users_of_the_database_are_named(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            pgdata = tmp_path / "pgdata"
            pgdata.mkdir()
            (pgdata / ".handle_pids.json").write_text(f"[{os.getpid()}, {dead.pid}, {live.pid}]")
            assert embedded_db.other_users(str(tmp_path)) == [
                f"{live.pid} ({sys.executable} -c import time; time.sleep(60))"
            ]
        finally:
            live.kill()


def wait_until_zombie(pid: int) -> None:
    process, deadline = psutil.Process(pid), time.monotonic() + 10
    while process.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"process {pid} did not exit"
        time.sleep(0.05)


START_THE_EMBEDDED_SERVER = (
    "import sys; from kope_web import embedded_db; "
    "print(embedded_db.socket_dir(sys.argv[1], 'kope_startup_check'))"
)


def start_embedded(data_dir: Path, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", START_THE_EMBEDDED_SERVER, str(data_dir)],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=as_a_terminal_starts_it,
        **popen,  # type: ignore[call-overload]
    )  # fmt: skip


def test_a_start_killed_inside_initdb_leaves_no_half_made_cluster(tmp_path: Path) -> None:
    pgdata, staging = tmp_path / "pgdata", tmp_path / "pgdata.initializing"
    first = start_embedded(tmp_path)
    deadline = time.monotonic() + 60
    # initdb writes PG_VERSION first and the databases last
    while not any((directory / "PG_VERSION").exists() for directory in (pgdata, staging)):
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "initdb never started"
        time.sleep(0.005)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not (pgdata / "PG_VERSION").exists(), "a half-made cluster is in the data dir"

    second = start_embedded(tmp_path)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert (pgdata / "PG_VERSION").exists() and not staging.exists()
    assert Path(out.strip()).is_dir(), out  # the socket dir of a server that answered


def test_a_data_dir_holding_only_bookkeeping_is_initialized(tmp_path: Path) -> None:
    """What the old, in-place initdb left after a Ctrl-C before it wrote PG_VERSION."""
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / ".handle_pids.json").write_text("[]")
    (pgdata / "log").write_text("")
    embedded_db.initialize_cluster(pgdata)
    assert (pgdata / "PG_VERSION").exists() and (pgdata / "global" / "pg_control").exists()
    assert not (pgdata / ".handle_pids.json").exists()


START_AND_HOLD_THE_EMBEDDED_SERVER = (
    "import sys, time; from kope_web import embedded_db; "
    "print(embedded_db.socket_dir(sys.argv[1], 'kope_startup_check'), flush=True); time.sleep(60)"
)


def wait_for_postmaster(pgdata: Path, starting: subprocess.Popen[str]) -> None:
    """Until the postmaster writes its lock file, early in its start; pg_ctl polls it ten
    times a second for the server being ready, so that wait is still on when this returns."""
    deadline = time.monotonic() + 60
    while not (pgdata / "postmaster.pid").exists():
        assert starting.poll() is None, starting.communicate()
        assert time.monotonic() < deadline, "the postmaster never started"
        time.sleep(0.001)


def assert_no_server_left(pgdata: Path) -> None:
    assert not embedded_db.postmasters_of(pgdata), "a postmaster is still running"
    assert not (pgdata / "postmaster.pid").exists()


def test_a_start_interrupted_while_the_server_comes_up_leaves_none_running(
    tmp_path: Path,
) -> None:
    """The postmaster runs in a session of its own, and this process is listed as its user
    only once it is ready: an interrupt before that (here one only Python gets, as
    `make run` turns a SIGTERM into, so pg_ctl is killed, not interrupted) left a server
    that no process had listed, so none would ever stop it."""
    pgdata = tmp_path / "pgdata"
    assert start_embedded(tmp_path).wait(timeout=120) == 0  # the cluster exists: no initdb
    starting = start_embedded(tmp_path)
    wait_for_postmaster(pgdata, starting)
    starting.send_signal(signal.SIGINT)
    _, err = starting.communicate(timeout=60)
    assert "KeyboardInterrupt" in err, err
    assert_no_server_left(pgdata)


def test_a_server_with_a_live_user_is_not_stopped_as_unclaimed(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    holder = subprocess.Popen(
        [sys.executable, "-c", START_AND_HOLD_THE_EMBEDDED_SERVER, str(tmp_path)],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline(), holder.communicate()
        embedded_db.stop_unclaimed_server(pgdata)
        assert embedded_db.postmasters_of(pgdata), "the server of a live user was stopped"
    finally:
        holder.send_signal(signal.SIGINT)  # its exit handler stops the server
        holder.communicate(timeout=60)
    assert_no_server_left(pgdata)


def test_a_data_dir_that_is_a_file_is_named(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "var"
    not_a_folder.write_text("a file, not a folder")
    result = manage("check", KOPE_DATA_DIR=str(not_a_folder))
    assert result.returncode == 2
    assert f"Configuration error: KOPE_DATA_DIR={str(not_a_folder)!r}" in result.stderr
    assert "Not a directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_data_dir_that_is_a_file_is_named_where_redis_needs_no_broker_folder(
    tmp_path: Path,
) -> None:
    """With REDIS_URL the settings make no folder there: the embedded database is the first
    to need one (migrate connects; Redis itself is never asked)."""
    not_a_folder = tmp_path / "var"
    not_a_folder.write_text("a file, not a folder")
    result = manage("migrate", KOPE_DATA_DIR=str(not_a_folder),
                    REDIS_URL="redis://127.0.0.1:9/0")  # fmt: skip
    assert result.returncode == 2
    assert (f"Configuration error: KOPE_DATA_DIR={str(not_a_folder)!r} cannot hold the "
            "embedded database: File exists.") in result.stderr  # fmt: skip
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("port", ["0", "-1", "70000"])
def test_a_port_out_of_range_is_refused_naming_the_option(port: str) -> None:
    result = manage("runstack", "--port", port, DJANGO_SETTINGS_MODULE="kope_web.settings.local")
    assert result.returncode == 2
    assert f"argument --port: {port} is not a port number (1 to 65535)" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_host_that_is_no_host_name_is_refused_naming_it() -> None:
    result = manage("runstack", "--port", "8199", KOPE_HOST="hôst..example",
                    DJANGO_SETTINGS_MODULE="kope_web.settings.local")  # fmt: skip
    assert result.returncode != 0
    assert "Cannot listen on 'hôst..example': not a host name or address" in result.stderr
    assert "Traceback" not in result.stderr
