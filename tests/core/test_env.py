from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from kope_web.env import (
    env_bool,
    env_database_url,
    env_float,
    env_int,
    env_log_level,
    env_redis_url,
    env_secret,
    env_str,
)


@pytest.mark.parametrize(
    ("name", "value", "read", "message"),
    [
        (
            "KOPE_PORT",
            "eighty",
            lambda: env_int("KOPE_PORT", 8000),
            "KOPE_PORT='eighty' is not an integer",
        ),
        (
            "KOPE_PORT",
            "70000",
            lambda: env_int("KOPE_PORT", 8000, maximum=65535),
            "KOPE_PORT=70000 is outside",
        ),
        (
            "KOPE_ATU_MIN_RATE",
            "fast",
            lambda: env_float("KOPE_ATU_MIN_RATE", 0.05, minimum=0.0, maximum=1.0),
            "KOPE_ATU_MIN_RATE='fast' is not a number",
        ),
        (
            "KOPE_ATU_MIN_RATE",
            "nan",
            lambda: env_float("KOPE_ATU_MIN_RATE", 0.05, minimum=0.0, maximum=1.0),
            "KOPE_ATU_MIN_RATE=nan is outside 0.0..1.0",
        ),
        (
            "DJANGO_DEBUG",
            "maybe",
            lambda: env_bool("DJANGO_DEBUG", False),
            "DJANGO_DEBUG='maybe' is not a boolean",
        ),
        (
            "DATABASE_URL",
            "mysql://x/y",
            lambda: env_database_url("DATABASE_URL"),
            "DATABASE_URL must start with postgresql://",
        ),
        (
            "DATABASE_URL",
            "postgresql://host/",
            lambda: env_database_url("DATABASE_URL"),
            "DATABASE_URL names no database",
        ),
        (
            "DATABASE_URL",
            "postgresql://h:port/db",
            lambda: env_database_url("DATABASE_URL"),
            "DATABASE_URL has a port",
        ),
        (
            "REDIS_URL",
            "http://x",
            lambda: env_redis_url("REDIS_URL"),
            "REDIS_URL must start with redis://",
        ),
        (
            "KOPE_LOG_LEVEL",
            "loud",
            lambda: env_log_level("KOPE_LOG_LEVEL", "INFO"),
            "KOPE_LOG_LEVEL='loud' is not a log level",
        ),
    ],
)
def test_a_malformed_value_names_the_variable(monkeypatch, name, value, read, message) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=message.replace("(", r"\(")):
        read()


def test_a_log_level_may_be_written_in_lower_case(monkeypatch) -> None:
    monkeypatch.setenv("KOPE_LOG_LEVEL", "debug")
    assert env_log_level("KOPE_LOG_LEVEL", "INFO") == "DEBUG"


def test_a_database_url_becomes_a_django_database(monkeypatch) -> None:
    monkeypatch.setenv(
        "DATABASE_URL", "postgresql://kope:p%40ss@db.internal:5433/kope?sslmode=require"
    )
    assert env_database_url("DATABASE_URL") == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "kope",
        "USER": "kope",
        "PASSWORD": "p@ss",
        "HOST": "db.internal",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require"},
    }


def test_a_database_url_may_name_a_unix_socket_directory(monkeypatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres:@/kope?host=/tmp/pg")
    parsed = env_database_url("DATABASE_URL")
    assert parsed is not None and parsed["HOST"] == "/tmp/pg" and parsed["OPTIONS"] == {}


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path) -> None:
    secret_file = tmp_path / "key"
    secret_file.write_text("s3cret\n")
    monkeypatch.setenv("DJANGO_SECRET_KEY_FILE", str(secret_file))
    assert env_secret("DJANGO_SECRET_KEY") == "s3cret"


def test_a_missing_secret_file_is_named(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY_FILE", str(tmp_path / "absent"))
    with pytest.raises(ImproperlyConfigured, match=r"DJANGO_SECRET_KEY_FILE=.*cannot be read"):
        env_secret("DJANGO_SECRET_KEY")


def test_a_secret_and_its_file_together_are_ambiguous(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "a")
    monkeypatch.setenv("DJANGO_SECRET_KEY_FILE", str(tmp_path / "b"))
    with pytest.raises(
        ImproperlyConfigured, match="either DJANGO_SECRET_KEY or DJANGO_SECRET_KEY_FILE"
    ):
        env_secret("DJANGO_SECRET_KEY")


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_text_variable_reads_as_its_default(monkeypatch, value) -> None:
    # As the numbers and flags do: `KOPE_HOST=` in an env file must not mean every interface,
    # nor `KOPE_DB_NAME=` a database named "".
    monkeypatch.setenv("KOPE_HOST", value)
    monkeypatch.setenv("KOPE_DB_NAME", value)
    assert env_str("KOPE_HOST", "127.0.0.1") == "127.0.0.1"
    assert env_str("KOPE_DB_NAME", "kope") == "kope"


def test_the_device_targets_allowed_are_the_queues_targets_are_sent_to() -> None:
    from django.conf import settings

    from apps.devices.targets import TARGETS

    queues = {target.queue.removeprefix("device.") for target in TARGETS.values()}
    assert set(settings.DEVICE_QUEUE_NAMES) == queues
