"""`make run` end to end: start, log in with Chromium, Ctrl-C, and start again on the same data."""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, expect

from .conftest import (
    ADMIN_USERNAME,
    CHROMIUM,
    MakeRun,
    port_is_free,
    postmaster_pid_file,
)

pytestmark = [pytest.mark.browser]

if not CHROMIUM.exists():
    reason = f"{CHROMIUM} is missing: install Debian's chromium (`make browser`)."
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} CI must run the browser tests, not skip them.", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

SESSIONS_PATH = re.compile(r"/t/[^/]+/sessions/$")
CSP_VIOLATION = re.compile(r"Content Security Policy|Refused to")


@dataclass
class BrowsingRecord:
    """What the pages said on the console and which URLs they requested."""

    console: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def log_in_as_admin(chromium: Browser, base_url: str, password: str,
                    context: BrowserContext | None = None) -> BrowsingRecord:  # fmt: skip
    """Log in through the login page, in a context of its own unless one is given (which
    stays open, signed in)."""
    record = BrowsingRecord()
    kept = context is not None
    context = context or chromium.new_context()
    try:
        page = context.new_page()
        page.on("console", lambda message: record.console.append(message.text))
        page.on("request", lambda request: record.requests.append(request.url))
        page.goto(urljoin(base_url, "accounts/login/"))
        page.locator("#id_username").fill(ADMIN_USERNAME)
        page.locator("#id_password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(SESSIONS_PATH)
        expect(page.get_by_role("heading", level=1)).to_have_text("Sessions")
        expect(page.locator("header").get_by_text(ADMIN_USERNAME, exact=True)).to_be_visible()
    finally:
        if not kept:
            context.close()
    return record


def assert_no_csp_violations(record: BrowsingRecord) -> None:
    violations = [text for text in record.console if CSP_VIOLATION.search(text)]
    assert not violations, f"CSP violations on the console: {violations}"


def assert_only_own_origin_requested(record: BrowsingRecord, base_url: str) -> None:
    own = urlsplit(base_url)
    foreign = [
        url
        for url in record.requests
        if (urlsplit(url).scheme, urlsplit(url).netloc) != (own.scheme, own.netloc)
    ]
    assert record.requests, "the pages made no requests at all"
    assert not foreign, f"requests to other origins than {base_url}: {foreign}"


def stop_with_ctrl_c(run: MakeRun, port: int, data_dir: Path, presses: int = 1) -> None:
    """Press Ctrl-C (twice: the second while the first stops the stack, as the impatient do)."""
    for press in range(presses):
        if press:
            time.sleep(0.2)
        run.press_ctrl_c()
    run.wait_for_exit(timeout_s=60)
    assert "Stopped." in run.lines, f"no 'Stopped.' line after Ctrl-C:\n{run.output}"
    assert not crashed(run.lines), f"a traceback after {presses} Ctrl-C:\n{run.output}"
    assert port_is_free(port), f"port {port} is still taken after Ctrl-C"
    assert_embedded_postgres_stopped(data_dir, run)


def assert_embedded_postgres_stopped(data_dir: Path, run: MakeRun) -> None:
    pid_file = postmaster_pid_file(data_dir)
    deadline = time.monotonic() + 10
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    handles = pid_file.with_name(".handle_pids.json")
    users = handles.read_text() if handles.exists() else "(none)"
    assert not pid_file.exists(), (
        f"embedded PostgreSQL still running ({pid_file}), users listed: {users}:\n{run.output}"
    )


def start_and_log_in(
    start_make_run: Callable[[], MakeRun], chromium: Browser, password: str,
    context: BrowserContext | None = None,
) -> tuple[MakeRun, float]:  # fmt: skip
    run = start_make_run()
    base_url, seconds = run.wait_until_ready(timeout_s=120)
    record = log_in_as_admin(chromium, base_url, password, context)
    assert_no_csp_violations(record)
    assert_only_own_origin_requested(record, base_url)
    return run, seconds


@pytest.mark.timeout(600)
def test_make_run_serves_login_stops_on_ctrl_c_and_restarts_on_same_data(
    start_make_run: Callable[[], MakeRun],
    chromium: Browser,
    admin_password: str,
    port: int,
    data_dir: Path,
) -> None:
    signed_in = chromium.new_context()  # stays signed in across the restart
    first_run, first = start_and_log_in(start_make_run, chromium, admin_password, signed_in)
    assert f"Created admin user {ADMIN_USERNAME!r}" in first_run.output
    stop_with_ctrl_c(first_run, port, data_dir)

    second_run, second = start_and_log_in(start_make_run, chromium, admin_password)
    assert "Created admin user" not in second_run.output, second_run.output
    # The same KOPE_ADMIN_PASSWORD is not set again: setting it ended every session of the admin.
    assert f"Admin user {ADMIN_USERNAME!r} exists" in second_run.output, second_run.output
    page = signed_in.new_page()
    page.goto(second_run.wait_until_ready(timeout_s=5)[0])
    expect(page.locator("header").get_by_text(ADMIN_USERNAME, exact=True)).to_be_visible()
    assert "/accounts/login/" not in page.url, page.url
    signed_in.close()
    # A second Ctrl-C cut the clean-up short: a KeyboardInterrupt traceback, and children
    # and the embedded database left running.
    stop_with_ctrl_c(second_run, port, data_dir, presses=2)

    print(f"make run started in {first:.1f} s, second run {second:.1f} s")


# Lines `make run` prints as it goes, and how long after each to press Ctrl-C: at once, and a
# moment later (inside the migrations on a fresh data dir, inside the suite load). Ctrl-C on a
# stack that is ready is the test above's.
STAGES = [
    ("Starting the database…", 0.0),
    ("Starting the database…", 1.5),
    ("Loading the built-in operator suite", 0.3),
    ("Built-in suite:", 0.0),
]


def crashed(lines: list[str]) -> bool:
    """A traceback, except the ones Python prints for an interrupt it swallowed itself (in a
    finalizer or a logging lock); `make run` notices those by its own flag."""
    return any(
        line.startswith("Traceback") and not lines[i - 1].startswith("Exception ignored")
        for i, line in enumerate(lines)
        if i > 0
    ) or (bool(lines) and lines[0].startswith("Traceback"))


@pytest.mark.timeout(600)
def test_ctrl_c_at_each_stage_of_start_up_leaves_a_clean_next_start(
    start_make_run: Callable[[], MakeRun], port: int, data_dir: Path
) -> None:
    for line, delay in STAGES:
        run = start_make_run()
        deadline = time.monotonic() + 120
        while not any(line in seen for seen in run.lines):
            if run.process.poll() is not None or time.monotonic() > deadline:
                break  # this data dir is past that stage already (the suite is loaded)
            time.sleep(0.05)
        time.sleep(delay)
        stop_with_ctrl_c(run, port, data_dir)
        assert not crashed(run.lines), f"Ctrl-C after {line!r}:\n{run.output}"

    final = start_make_run()
    base_url, _ = final.wait_until_ready(timeout_s=120)
    assert any(seen.startswith("Built-in suite: ") for seen in final.lines), final.output
    with urllib.request.urlopen(urljoin(base_url, "accounts/login/"), timeout=10) as page:  # noqa: S310
        assert page.status == 200
    stop_with_ctrl_c(final, port, data_dir)
