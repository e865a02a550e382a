"""Start-up with bad configuration: a message naming the problem and a hint, no traceback."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kope_web import embedded_db

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
