from __future__ import annotations

import dataclasses

import factory
from django.contrib.auth.models import User

from apps.accounts.models import Membership, Team
from apps.accounts.roles import Role
from apps.operators.builtin_suite import builtin_definition, read_builtin_suite
from apps.operators.models import OperatorVersion
from apps.operators.services import version_store
from apps.operators.spec import CaseSpec, TensorSpec


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Role.VIEWER


def stored_builtin(slug: str, team: Team | None = None) -> OperatorVersion:
    """A built-in operator stored without running its reference.

    The case outcomes are the shapes its spec declares, which is what the reference produces
    (tests/operators/test_builtin_suite.py proves that for every built-in operator).
    """
    folder = next(f for f in read_builtin_suite() if f.spec.slug == slug)
    definition = builtin_definition(folder)
    outcomes = [
        {
            "inputs": [_declared(t, case) for t in folder.spec.inputs],
            "outputs": [_declared(t, case) for t in folder.spec.outputs],
        }
        for case in folder.spec.cases
    ]
    version, _ = version_store(team=team, definition=definition, outcomes=outcomes, created_by=None)
    return version


def _declared(tensor: TensorSpec, case: CaseSpec) -> dict[str, object]:
    return {"shape": tensor.resolved_shape(case.params), "dtype": tensor.resolved_dtype(case.dtype)}


def small_builtin(slug: str, cases: list[CaseSpec], team: Team | None = None) -> OperatorVersion:
    """A built-in operator under another slug (`<slug>_small`) with only the given cases: a
    real operator whose evaluations and profiles take a moment instead of minutes."""
    folder = next(f for f in read_builtin_suite() if f.spec.slug == slug)
    spec = dataclasses.replace(folder.spec, slug=f"{slug}_small", cases=cases)
    definition = dataclasses.replace(builtin_definition(folder), spec=spec)
    outcomes = [
        {
            "inputs": [_declared(t, case) for t in spec.inputs],
            "outputs": [_declared(t, case) for t in spec.outputs],
        }
        for case in cases
    ]
    version, _ = version_store(team=team, definition=definition, outcomes=outcomes, created_by=None)
    return version


def store_every_builtin() -> None:
    """So `bench` finds the suite stored and runs no reference to load it."""
    for folder in read_builtin_suite():
        stored_builtin(folder.spec.slug)
