from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from celery import current_app
from django.contrib.auth.models import User
from django.test import Client

from apps.accounts.models import Membership, Team
from apps.accounts.roles import Role
from kope_web.channel_layers import close_pool
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.fast_run import fast_run, refuse_to_start_processes, without_database_tests


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    yield
    close_pool()  # or its connections keep the test database from being dropped


@pytest.fixture
def team(db: None) -> Team:
    return TeamFactory(slug="kernels", name="Kernels")


@pytest.fixture
def other_team(db: None) -> Team:
    return TeamFactory(slug="elsewhere", name="Elsewhere")


@pytest.fixture
def member(team: Team) -> Callable[[Role | str], User]:
    """Make a user with the given role in `team`; 'outsider' belongs only to another team."""

    def make(role: Role | str) -> User:
        if role == "outsider":
            return MembershipFactory(team=TeamFactory(), role=Role.ADMIN).user
        membership: Membership = MembershipFactory(team=team, role=role)
        return membership.user

    return make


@pytest.fixture
def client_for(member: Callable[[Role | str], User]) -> Callable[[Role | str], Client]:
    def make(role: Role | str) -> Client:
        client = Client()
        client.force_login(member(role))
        return client

    return make


@pytest.fixture
def admin_client_of_team(client_for: Callable[[Role | str], Client]) -> Client:
    return client_for(Role.ADMIN)


@pytest.fixture
def user(db: None) -> User:
    return UserFactory()


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """A task queued (on commit) runs right where it is sent, as its worker would run it."""
    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True
    yield
    current_app.conf.task_always_eager = before


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="only the tests that need no database and start no process")  # fmt: skip


def pytest_collection(session: pytest.Session) -> None:
    if fast_run(session.config):  # after the session started: xdist's workers run uname there
        refuse_to_start_processes(session.config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if fast_run(config):
        without_database_tests(config, items)
