"""The Workers page when the broker is away: it says so instead of answering 500.

The server is a real Daphne process whose REDIS_URL names a port nothing listens on, as a
web host sees Redis while it is down.
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from django.test import Client, override_settings

from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.factories import MembershipFactory, TeamFactory
from tests.processes import celery_worker, daphne, free_port
from tests.workbench.test_live_events import process_env

BROKER_DOWN = "The broker is not answering"


@pytest.fixture
def engineer(transactional_db: None) -> Membership:
    return MembershipFactory(team=TeamFactory(slug="live"), role=Role.ENGINEER)


@pytest.fixture
def redis_down_server() -> Iterator[str]:
    env = process_env("many-hosts") | {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with daphne(env) as url:
        yield url


def ask(url: str, membership: Membership, *, method: str = "GET",
        htmx: bool = False) -> tuple[int, str]:  # fmt: skip
    """The status and body a logged-in browser gets (a POST with its CSRF cookie and token)."""
    browser = Client()
    browser.force_login(membership.user)
    csrf = secrets.token_hex(16)  # 32 characters: a secret Django takes as cookie and token
    headers = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}; csrftoken={csrf}",
               "X-CSRFToken": csrf}  # fmt: skip
    if htmx:
        headers["HX-Request"] = "true"
    request = urllib.request.Request(url, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (loopback)
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_page_says_the_broker_is_down_instead_of_a_500(
    engineer: Membership, redis_down_server: str
) -> None:
    status, page = ask(f"{redis_down_server}/t/live/workers/?ask=now", engineer)

    assert status == 503, page[:500]
    assert BROKER_DOWN in page and "<h1>Workers</h1>" in page
    assert "No worker answered" not in page  # nobody could be asked
    assert "Check workers" not in page  # a check could not be sent either


def test_the_list_asked_for_after_the_page_says_the_broker_is_down(
    engineer: Membership, redis_down_server: str
) -> None:
    """The page comes at once, asking nobody; the list it then asks for says the broker is
    down, with a 200 (htmx swaps in only a 2xx answer)."""
    status, page = ask(f"{redis_down_server}/t/live/workers/", engineer)
    assert status == 200 and "Checking which workers are connected" in page

    status, part = ask(f"{redis_down_server}/t/live/workers/?part=list", engineer, htmx=True)

    assert status == 200, part[:500]
    assert BROKER_DOWN in part and "No worker answered" not in part


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_a_check_the_broker_refuses_says_so_instead_of_a_500(
    engineer: Membership, redis_down_server: str, htmx: bool
) -> None:
    status, answer = ask(f"{redis_down_server}/t/live/workers/check/", engineer, method="POST",
                         htmx=htmx)  # fmt: skip

    # htmx swaps in only a 2xx answer: the refusal it shows in the check's status line
    assert status == (200 if htmx else 503), answer[:500]
    assert BROKER_DOWN in answer and "sent to" not in answer


@override_settings(DEVICE_TARGETS=["cpu", "cuda"])
def test_each_queue_is_listed_with_the_targets_it_serves(
    client_for: Callable[[Role], Client],
) -> None:
    page = client_for(Role.VIEWER).get("/t/kernels/workers/").content.decode()

    assert "<code>device.cpu</code> (cpu-c)" in page
    assert "<code>device.cuda</code> (triton, cuda)" in page
    # the queue is not named after the target: cpu-c's is device.cpu, not device.cpu-c
    assert "device.&lt;target&gt;" not in page


@override_settings(WORKER_PING_TIMEOUT_S=0.5)
def test_the_workers_table_says_how_long_they_had_to_answer(transactional_db: None) -> None:
    """KOPE_WORKER_PING_TIMEOUT_MS sets the wait; the caption said "within a second" whatever
    it was."""
    membership = MembershipFactory(team=TeamFactory(slug="live"), role=Role.VIEWER)
    browser = Client()
    browser.force_login(membership.user)
    with celery_worker(process_env("single-machine"), "agent", "caption@test"):
        page = browser.get("/t/live/workers/?ask=now").content.decode()

    assert "<td>caption@test</td>" in page
    assert "answered a broadcast ping within 500 ms" in page


def test_a_check_sent_without_javascript_says_it_was_sent(
    client_for: Callable[[Role], Client],
) -> None:
    """The form without htmx redirected back to the page with no word of the check."""
    page = client_for(Role.ENGINEER).post("/t/kernels/workers/check/", follow=True)

    assert page.redirect_chain == [("/t/kernels/workers/", 302)]
    assert re.search(r"Check \w{12} sent to agent, device\.cpu", page.content.decode())


@pytest.mark.parametrize("method, path", [("GET", "workers"), ("POST", "workers/check")])
def test_the_workers_api_says_the_broker_is_down_instead_of_a_500(
    engineer: Membership, redis_down_server: str, method: str, path: str
) -> None:
    status, answer = ask(f"{redis_down_server}/api/teams/live/{path}", engineer, method=method)

    assert status == 503, answer[:500]
    error = json.loads(answer)["error"]
    assert error["code"] == "broker_unavailable"
    assert "broker (Redis) is not answering" in error["message"]
