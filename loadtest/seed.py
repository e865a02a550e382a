"""The team the load run simulates, written into the throwaway database (Django set up).

Viewers and reviewers log in with session cookies made here; reviewers also get API tokens.
Each reviewer decides only its own share of the pending rules, so two never race for one.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.accounts.services import api_token_create, membership_set, team_create
from apps.memory.rules import Wording, rule_propose
from apps.runs.config import Budgets, Measurement
from apps.runs.services import session_create

TEAM = "load"
# Small level-1 operators: an iteration is a second or two of device time on the CPU.
OPERATORS = ["relu", "vector_add", "gelu", "sigmoid", "axpby"]
STRATEGIES = ["omp_parallel_for", "omp_simd", "unroll", "tile", "restrict_pointers"]
FAST = Measurement(seeds=1, warmup=1, repeats=5)


def login_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


def seed_team(
    *, viewers: int, reviewers: int, rules: int, sessions: int, rounds: int
) -> dict[str, Any]:
    users = get_user_model().objects
    owner = users.create_user(username="load-owner", password=None)
    team = team_create(name="Load", owner=owner, slug=TEAM)
    viewer_cookies = [_member(team, f"load-viewer-{i}", Role.VIEWER)[0] for i in range(viewers)]
    reviewer_logins = [_member(team, f"load-reviewer-{i}", Role.REVIEWER) for i in range(reviewers)]
    # Sessions first: their first iterations queue ahead of the rules' embeddings.
    session_ids = [_session(team, owner, i, rounds).pk for i in range(sessions)]
    rule_ids = [_rule(team, i).pk for i in range(rules)]
    return {
        "team": TEAM,
        "viewers": viewer_cookies,
        "reviewers": [
            {"cookie": cookie, "token": token, "rules": rule_ids[i::reviewers]}
            for i, (cookie, token) in enumerate(reviewer_logins)
        ],
        "sessions": session_ids,
    }


def _member(team: Team, username: str, role: Role) -> tuple[str, str]:
    user = get_user_model().objects.create_user(username=username, password=None)
    membership_set(team=team, username=username, role=role)
    token = api_token_create(user=user, name="load") if role == Role.REVIEWER else None
    return login_cookie(user), token.plaintext if token else ""


def _rule(team: Team, n: int) -> Any:
    strategy, operator = STRATEGIES[n % len(STRATEGIES)], OPERATORS[n % len(OPERATORS)]
    wording = Wording(
        statement=f"Try {strategy} early on elementwise loops (load rule {n}).",
        applies_when=f"the kernel is a flat loop like {operator}",
        not_when="the loop carries a dependency",
    )
    evidence = {"operators": [operator], "adoptions": 3, "value": 0.1 + (n % 7) / 10}
    return rule_propose(team=team, source_key=f"load:{n}", wording=wording, evidence=evidence)


def _session(team: Team, owner: Any, n: int, rounds: int) -> Any:
    # Each session walks the operators from a different start, so all five run at once.
    operators = OPERATORS[n % len(OPERATORS) :] + OPERATORS[: n % len(OPERATORS)]
    return session_create(
        team=team,
        user=owner,
        operators=operators,
        policy="offline",
        seed=n,
        budgets=Budgets(rounds=rounds, plateau=rounds),
        measurement=FAST,
        label=f"load {n}",
    )
