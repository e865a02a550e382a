"""docker/: every compose command names something the project has, on one non-root image.

Docker itself is not needed: the files are read, and each name they mention is looked up in
the project (management commands, the ASGI app, the Celery app and its queues, settings).
"""

from __future__ import annotations

import importlib
import re
import shlex
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml
from celery import Celery
from celery.app.utils import find_app
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SETTINGS_DIR = ROOT / "kope_web" / "settings"

# Read by Django itself rather than by our settings.
DJANGO_OWN_VARIABLES = {"DJANGO_SETTINGS_MODULE"}
# kope_web/env.py: these readers also accept NAME_FILE, the path of a file holding the value.
FILE_READERS = {"env_secret", "env_database_url", "env_redis_url"}
ENV_CALL = re.compile(r"\b(env_[a-z_]+)\(\s*[\"']([A-Z][A-Z0-9_]*)[\"']")


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def app_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services built from our Dockerfile (the rest are stock images: db, redis)."""
    return {name: service for name, service in services.items() if "build" in service}


def settings_variables() -> set[str]:
    """Every environment variable kope_web/settings reads through the kope_web.env readers."""
    names = set(DJANGO_OWN_VARIABLES)
    for source in SETTINGS_DIR.glob("*.py"):
        for reader, name in ENV_CALL.findall(source.read_text()):
            names.add(name)
            if reader in FILE_READERS:
                names.add(f"{name}_FILE")
    return names


def option_value(args: list[str], index: int, short: str, long: str) -> tuple[str | None, int]:
    """The value of -X VALUE, --long VALUE or --long=VALUE at args[index], and the next index."""
    arg = args[index]
    if arg in (short, long):
        return (args[index + 1] if index + 1 < len(args) else ""), index + 2
    if arg.startswith(f"{long}="):
        return arg.split("=", 1)[1], index + 1
    return None, index


def manage_py_problems(args: list[str]) -> list[str]:
    if len(args) < 2 or args[0] != "manage.py":
        return [f"expected `python manage.py COMMAND`, got {shlex.join(['python', *args])!r}"]
    if args[1] not in get_commands():
        return [f"{args[1]!r} is not a management command of this project"]
    return []


def daphne_problems(args: list[str]) -> list[str]:
    target = args[-1] if args else ""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        return [f"daphne needs MODULE:ATTRIBUTE as its last argument, got {target!r}"]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        return [f"daphne application module {module_name!r} does not import: {error}"]
    if not hasattr(module, attribute):
        return [f"{module_name!r} has no attribute {attribute!r} for daphne to serve"]
    return []


def celery_problems(args: list[str]) -> list[str]:
    from apps.devices.workers import known_queues

    app_name: str | None = None
    queues: str | None = None
    subcommand: str | None = None
    index = 0
    while index < len(args):
        value, after = option_value(args, index, "-A", "--app")
        if value is not None:
            app_name, index = value, after
            continue
        value, after = option_value(args, index, "-Q", "--queues")
        if value is not None:
            queues, index = value, after
            continue
        if subcommand is None and not args[index].startswith("-"):
            subcommand = args[index]
        index += 1

    problems: list[str] = []
    if not app_name:
        problems.append("celery needs -A APP")
    else:
        try:
            found = find_app(app_name)
        except (ImportError, AttributeError) as error:
            problems.append(f"celery app {app_name!r} cannot be found: {error}")
        else:
            if not isinstance(found, Celery):
                problems.append(f"celery -A {app_name} names {found!r}, not a Celery app")
    if subcommand != "worker":
        problems.append(f"celery {subcommand!r} is not checked here; only `worker` is")
    elif not queues:
        # Without -Q a worker takes the default queue, so a device worker would run agent work.
        problems.append("a celery worker must name its queues with -Q")
    else:
        known = known_queues()
        problems.extend(
            f"queue {queue!r} is not one of known_queues() {known}"
            for queue in queues.split(",")
            if queue not in known
        )
    return problems


CHECKERS = {"daphne": daphne_problems, "celery": celery_problems}


def command_problems(command: str | list[str]) -> list[str]:
    """What is wrong with one compose `command`; empty when its program and names exist."""
    args = shlex.split(command) if isinstance(command, str) else list(command)
    if not args:
        return ["the command is empty"]
    program, rest = args[0], args[1:]
    if program == "python":
        return manage_py_problems(rest)
    if not entry_points(group="console_scripts", name=program):
        return [f"{program!r} is not a program installed by the project's dependencies"]
    checker = CHECKERS.get(program)
    if checker is None:
        return [f"{program!r} is not checked here; teach command_problems about it"]
    return checker(rest)


def image_problems(services: dict[str, dict[str, Any]]) -> list[str]:
    apps = app_services(services)
    if not apps:
        return ["no service is built from docker/Dockerfile"]
    problems = [
        f"{name} runs a command but is not built from docker/Dockerfile"
        for name, service in services.items()
        if "command" in service and name not in apps
    ]
    images = {service.get("image") for service in apps.values()}
    builds = {yaml.safe_dump(service["build"]) for service in apps.values()}
    if len(images) != 1 or None in images:
        problems.append(f"the app services must share one named image, got {images}")
    if len(builds) != 1:
        problems.append(f"the app services must share one build, got {sorted(builds)}")
    return problems


def environment_problems(services: dict[str, dict[str, Any]], known: set[str]) -> list[str]:
    problems: list[str] = []
    for name, service in app_services(services).items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.partition("=")[::2] for item in environment)
        problems.extend(
            f"{name} sets {variable}, which kope_web/settings never reads"
            for variable in environment
            if variable not in known
        )
    return problems


def dockerfile_user_problems(text: str) -> list[str]:
    """The final stage must switch to a user other than root."""
    logical = re.sub(r"\\\n", " ", text)
    stages: list[list[str]] = []
    for line in logical.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].upper() == "FROM":
            stages.append([])
        elif stages and words[0].upper() == "USER":
            stages[-1].append(words[1] if len(words) > 1 else "")
    if not stages:
        return ["the Dockerfile has no FROM"]
    if not stages[-1]:
        return ["the final stage never sets USER, so it runs as root"]
    user = stages[-1][-1].split(":")[0]
    if user in {"", "root", "0"}:
        return [f"the final stage runs as {stages[-1][-1]!r}"]
    return []


def test_every_compose_command_exists_in_the_project() -> None:
    services = compose_services()
    commands = {name: s["command"] for name, s in services.items() if "command" in s}
    assert {"migrate", "web", "agent", "device-cpu"} <= commands.keys()

    problems = [f"{name}: {p}" for name, c in commands.items() for p in command_problems(c)]

    assert problems == []


@pytest.mark.parametrize(
    "command",
    [
        "python manage.py no_such_command",
        "python no_such_script.py",
        "daphne -b 0.0.0.0 -p 8000 kope_web.asgi:no_such_app",
        "daphne -b 0.0.0.0 -p 8000 kope_web.no_such_module:application",
        "celery -A kope_web worker -Q device.no_such_target",
        "celery -A kope_web worker --queues=agent,device.no_such_target",
        "celery -A kope_web worker --concurrency 2",
        "celery -A no_such_package worker -Q agent",
        "celery -A kope_web beat",
        "no_such_program --serve",
        "",
    ],
)
def test_a_command_naming_something_missing_is_reported(command: str) -> None:
    assert command_problems(command) != []


def test_every_app_service_runs_the_one_image() -> None:
    assert image_problems(compose_services()) == []


def test_a_service_with_its_own_image_is_reported() -> None:
    services = compose_services()
    services["agent"] = {**services["agent"], "image": "kope-agent:latest"}
    services["stray"] = {"image": "python:3.11", "command": "python manage.py bootstrap"}

    problems = image_problems(services)

    assert any("one named image" in p for p in problems)
    assert any(p.startswith("stray") for p in problems)


def test_compose_sets_only_variables_the_settings_read() -> None:
    known = settings_variables()
    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE"} <= known

    assert environment_problems(compose_services(), known) == []


def test_a_variable_the_settings_never_read_is_reported() -> None:
    services = {"web": {"build": ".", "environment": ["DATABASE_URL=x", "DJANGO_DEBUGG=true"]}}

    problems = environment_problems(services, settings_variables())

    assert problems == ["web sets DJANGO_DEBUGG, which kope_web/settings never reads"]


def test_the_image_runs_as_a_non_root_user() -> None:
    assert dockerfile_user_problems(DOCKERFILE.read_text()) == []


@pytest.mark.parametrize(
    "dockerfile",
    [
        'FROM python AS build\nUSER kope\nFROM python AS runtime\nCMD ["daphne"]\n',
        "FROM python\nUSER kope\nRUN make \\\n  all\nUSER root\n",
        "FROM python\nUSER 0:0\n",
        "# no stages at all\n",
    ],
)
def test_a_dockerfile_whose_final_stage_runs_as_root_is_reported(dockerfile: str) -> None:
    assert dockerfile_user_problems(dockerfile) != []


def test_every_setting_variable_is_documented_and_in_env_example() -> None:
    """The documentation as a whole: README.md and every page under docs/."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    documentation = "\n".join(page.read_text() for page in pages)
    example = (ROOT / ".env.example").read_text()
    variables = {v for v in settings_variables() if not v.endswith("_FILE")}
    assert sorted(v for v in variables if f"`{v}`" not in documentation) == []
    assert sorted(v for v in variables if v not in example) == []


def image_data_folder(name: str) -> str:
    """A folder of KOPE_DATA_DIR (the Dockerfile's ENV) in the image: `imports` is
    KOPE_IMPORT_ROOTS' default, `uploads` holds the archives uploaded to the Imports page."""
    found = re.search(r"\bKOPE_DATA_DIR=(\S+)", DOCKERFILE.read_text())
    assert found, "the Dockerfile sets no KOPE_DATA_DIR"
    return f"{found.group(1).rstrip('/')}/{name}"


def named_volume_at(service: dict[str, Any], target: str) -> str | None:
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            mounted_at = rest.split(":")[0]
        else:
            source, mounted_at = volume.get("source", ""), volume.get("target", "")
        if mounted_at.rstrip("/") == target:
            return str(source)
    return None


@pytest.mark.parametrize("folder", ["imports", "uploads"])
def test_the_web_and_the_agent_worker_see_the_same_import_folders(folder: str) -> None:
    """The web checks that an import's folder exists (or unpacks an uploaded archive into
    one), then the agent worker reads it: in separate containers, they need one volume there."""
    compose = yaml.safe_load(COMPOSE.read_text())
    services, root = compose["services"], image_data_folder(folder)

    web, agent = (named_volume_at(services[name], root) for name in ("web", "agent"))

    assert web is not None, f"nothing is mounted at {root} in web"
    assert agent == web
    assert web in (compose.get("volumes") or {})  # a named volume: kept across restarts


def published_on_all_interfaces(services: dict[str, dict[str, Any]]) -> list[str]:
    """Ports a service publishes on every interface of the host rather than on loopback."""
    found = []
    for name, service in services.items():
        for port in service.get("ports", []):
            if isinstance(port, dict):
                host_ip = port.get("host_ip", "")
            else:
                parts = str(port).rsplit(":", 2)
                host_ip = parts[0] if len(parts) == 3 else ""
            if host_ip not in ("127.0.0.1", "[::1]", "::1"):
                found.append(f"{name}: {port}")
    return found


def test_the_web_port_is_published_on_loopback_only() -> None:
    """It serves plain HTTP (the login form's password included) with the SSL redirect off:
    published on every interface, anyone on the network could reach it."""
    assert published_on_all_interfaces(compose_services()) == []


@pytest.mark.parametrize("port", ["8000:8000", "0.0.0.0:8000:8000", 8000, {"target": 8000}])
def test_a_port_published_beyond_loopback_is_reported(port: object) -> None:
    assert published_on_all_interfaces({"web": {"ports": [port]}}) == [f"web: {port}"]


def test_the_image_records_the_commit_it_was_built_from() -> None:
    """An image has no git checkout: compose passes KOPE_CODE_VERSION as a build arg and the
    runtime stage keeps it in the environment the settings read."""
    build = yaml.safe_load(COMPOSE.read_text())["x-app"]["build"]
    runtime = DOCKERFILE.read_text().split("AS runtime", 1)[1]

    assert "KOPE_CODE_VERSION" in (build.get("args") or {})
    assert re.search(r"^ARG KOPE_CODE_VERSION\b", runtime, re.MULTILINE)
    assert re.search(r"\bKOPE_CODE_VERSION=\$\{KOPE_CODE_VERSION\}", runtime)
    assert "KOPE_CODE_VERSION" in settings_variables()
