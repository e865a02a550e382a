"""Two people doing the same thing at the same moment, raced for real against PostgreSQL.

Each racer runs in a thread with its own connection and commits for real. Where the window
is narrow, `race_behind` holds a row lock from the test's own connection and lets go only
once every racer waits on a lock, so each has read the state it acts on before any of them
writes: the race happens every time, not by luck. The others line up on a barrier and are
tried a few times.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Model, QuerySet
from django.test import Client

from apps.accounts.models import ApiToken, Membership, Team
from apps.accounts.roles import Role
from apps.accounts.services import (
    api_token_create,
    api_token_revoke,
    membership_remove,
    membership_set,
    team_create,
)
from apps.core.errors import Conflict
from apps.memory.hot import recorded_residents
from apps.memory.models import JournalEvent, MemoryVector, Rule
from apps.memory.rules import (
    Wording,
    hot_memory,
    rule_approve,
    rule_propose,
    rule_reserve,
    rule_veto,
)
from apps.operators.importing import import_execute, import_start, summary
from apps.operators.models import Operator, OperatorVersion, Suite
from apps.operators.services import suite_set, version_edit
from apps.reports.models import Export
from apps.reports.services import knowledge_import
from apps.runs import loop
from apps.runs.models import OptimizationSession
from apps.runs.services import session_create, session_pause, session_resume, session_stop
from tests.factories import MembershipFactory, TeamFactory, UserFactory, stored_builtin
from tests.operators.conftest import SAMPLES

pytestmark = pytest.mark.django_db(transaction=True)

TRIES = 5  # for the races the test cannot line up through a lock
LOCK_WAIT_S = 30.0  # a racer that runs a reference first may take seconds to get there

TILING = Wording("Tile the k loop in blocks of 64 floats", "matmul-like loops over k >= 256")


# --- racing ------------------------------------------------------------------------------------


def _racer(action: Callable[[], Any], results: list[Any], index: int,
           ready: Callable[[], Any]) -> threading.Thread:  # fmt: skip
    def run() -> None:
        try:
            ready()
            results[index] = action()
        except Exception as error:  # the outcome under test, kept for the assertions
            results[index] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a racer hung"


def race(*actions: Callable[[], Any]) -> list[Any]:
    """Run the actions at once; what each returned, or the exception it raised."""
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)
    _join([_racer(a, results, i, barrier.wait) for i, a in enumerate(actions)])
    return results


def lock_waiters() -> int:
    """Connections to this test database that wait on a lock, now (the activity view is
    otherwise read once per transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


def wait_for_waiters(count: int) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while lock_waiters() < count and time.monotonic() < deadline:
        time.sleep(0.01)


def race_behind(rows: QuerySet[Any], *actions: Callable[[], Any]) -> list[Any]:
    """Run the actions, in the order given, while this test holds `rows` locked; let go once
    every action waits on a lock (or a few seconds passed: one that never waits has raced
    anyway). PostgreSQL then grants the lock in the order the actions asked for it."""
    results: list[Any] = [None] * len(actions)
    threads = []
    with transaction.atomic():
        list(rows.select_for_update())
        for index, action in enumerate(actions):
            threads.append(_racer(action, results, index, lambda: None))
            wait_for_waiters(index + 1)
    _join(threads)
    return results


def locked(model_object: Model) -> QuerySet[Any]:
    return type(model_object)._default_manager.filter(pk=model_object.pk)


def conflicts(results: Sequence[Any]) -> list[Conflict]:
    return [r for r in results if isinstance(r, Conflict)]


def unexpected(results: Sequence[Any]) -> list[Exception]:
    return [r for r in results if isinstance(r, Exception) and not isinstance(r, Conflict)]


# --- rules -------------------------------------------------------------------------------------


def propose(team: Team, source: str, value: float = 0.5) -> Rule:
    defaults = {"kind": "case", "text": source, "value": value, "team": team}
    MemoryVector.objects.update_or_create(key=source, defaults=defaults)
    return rule_propose(team=team, source_key=source, wording=TILING,
                        evidence={"cases": [source]})  # fmt: skip


def transition_chain_holds(rule: Rule) -> bool:
    """Each recorded transition starts where the one before it ended."""
    chain = list(rule.transitions.order_by("at", "pk").values_list("from_status", "to_status"))
    return all(after[0] == before[1] for before, after in itertools.pairwise(chain))


@pytest.fixture
def two_reviewers(member: Callable[[Role | str], User]) -> tuple[User, User]:
    return member(Role.REVIEWER), member(Role.ADMIN)


def test_two_reviewers_opening_one_rule_at_once_one_holds_it(
    team: Team, two_reviewers: tuple[User, User]
) -> None:
    rule = propose(team, "case:1")
    first, second = two_reviewers
    results = race_behind(locked(rule), lambda: rule_reserve(rule=rule, user=first),
                          lambda: rule_reserve(rule=rule, user=second))  # fmt: skip
    assert unexpected(results) == []
    assert len(conflicts(results)) == 1
    assert "is reviewing this rule until" in str(conflicts(results)[0])
    rule.refresh_from_db()
    assert rule.reserved_by in two_reviewers


def test_an_approval_and_a_veto_at_once_are_recorded_one_after_the_other(
    team: Team, two_reviewers: tuple[User, User]
) -> None:
    rule = propose(team, "case:1")
    approver, vetoer = two_reviewers
    results = race_behind(
        locked(rule),
        lambda: rule_approve(rule=rule, user=approver, version_number=1),
        lambda: rule_veto(rule=rule, user=vetoer, reason="only on AVX-512"),
    )
    assert unexpected(results) == []
    rule.refresh_from_db()
    assert rule.status == "vetoed" and rule.approved_version is None
    assert transition_chain_holds(rule)
    assert hot_memory(team) == [] and recorded_residents(team) == set()


def test_two_approvals_of_one_version_at_once_approve_it_once(
    team: Team, two_reviewers: tuple[User, User]
) -> None:
    rule = propose(team, "case:1")
    results = race_behind(
        locked(rule), *(lambda u=u: rule_approve(rule=rule, user=u, version_number=1)
                        for u in two_reviewers),
    )  # fmt: skip
    assert unexpected(results) == [] and conflicts(results) == []
    rule.refresh_from_db()
    assert rule.status == "approved" and rule.approved_version.number == 1
    assert list(rule.transitions.values_list("to_status", flat=True)) == [
        "candidate", "pending", "approved"]  # fmt: skip
    assert recorded_residents(team) == {rule.pk}


def test_edit_and_approve_on_the_page_while_another_reviewer_vetoes_is_all_or_nothing(
    team: Team, member: Callable[[Role | str], User]
) -> None:
    editor, vetoer = member(Role.REVIEWER), member(Role.ADMIN)
    for attempt in range(TRIES):
        rule = propose(team, f"case:{attempt}")
        results = race_behind(
            locked(rule),
            lambda rule=rule: edit_then_approve(team, rule, editor),
            lambda rule=rule: rule_veto(rule=rule, user=vetoer, reason="no"),
        )
        assert unexpected(results) == []
        rule.refresh_from_db()
        by_editor = list(rule.transitions.filter(actor=editor).values_list("to_status", flat=True))
        assert by_editor in ([], ["pending", "approved"]), (
            f"half of an edit-and-approve: {by_editor}"
        )
        assert rule.versions.count() == (2 if by_editor else 1)
        assert rule.status == "vetoed" and transition_chain_holds(rule)


def edit_then_approve(team: Team, rule: Rule, editor: User) -> int:
    client = Client()
    client.force_login(editor)
    answer = client.post(f"/t/{team.slug}/review/{rule.pk}/edit/", {
        "statement": "Tile by 32", "applies_when": "small caches", "then": "approve"})  # fmt: skip
    return answer.status_code


def test_two_decisions_landing_at_once_leave_hot_memory_as_it_should_be(
    team: Team, two_reviewers: tuple[User, User], settings: Any
) -> None:
    weak, strong = propose(team, "case:1", value=0.2), propose(team, "case:2", value=0.9)
    Rule.objects.filter(pk__in=[weak.pk, strong.pk]).update(frequency=1.0)
    settings.KOPE_HOT_MEMORY_TOKENS = weak.versions.get().tokens + 5  # room for one of them
    first, second = two_reviewers
    results = race_behind(
        locked(team),
        lambda: rule_approve(rule=weak, user=first, version_number=1),
        lambda: rule_approve(rule=strong, user=second, version_number=1),
    )
    assert unexpected(results) == []
    assert recorded_residents(team) == {v.rule_id for v in hot_memory(team)} == {strong.pk}


def test_two_consolidations_proposing_one_experience_at_once_make_one_rule(team: Team) -> None:
    MemoryVector.objects.create(key="case:1", kind="case", text="tile", value=0.5, team=team)
    results = race_behind(
        locked(team),
        *(lambda: rule_propose(team=team, source_key="case:1", wording=TILING, evidence={})
          for _ in range(2)),
    )  # fmt: skip
    assert unexpected(results) == []
    assert results[0].pk == results[1].pk
    rule = Rule.objects.get(team=team)
    assert rule.versions.count() == 1 and rule.transitions.count() == 2


def knowledge_file(source_team: str, rule_ids: Sequence[int]) -> bytes:
    rules = [{"id": n, "source_key": f"case:{n}", "status": "approved", "approved_version": 1,
              "versions": [{"number": 1, "statement": f"Rule {n}", "applies_when": "always",
                            "not_when": "", "evidence": {}}], "history": []}
             for n in rule_ids]  # fmt: skip
    return json.dumps({"format": "kope-knowledge-base", "version": 1,
                       "exported_at": "2026-01-01", "team": {"slug": source_team,
                       "name": source_team}, "rules": rules}).encode()  # fmt: skip


def test_two_knowledge_imports_of_one_file_at_once_import_it_once(
    team: Team, two_reviewers: tuple[User, User]
) -> None:
    for attempt in range(TRIES):
        raw = knowledge_file(f"origin-{attempt}", range(1, 6))
        results = race(*(lambda u=u, raw=raw: knowledge_import(team=team, user=u,
                                                               filename="kb.json", raw=raw)
                         for u in two_reviewers))  # fmt: skip
        assert unexpected(results) == []
        imported = Rule.objects.filter(
            team=team, source_key__startswith=f"import:origin-{attempt}:"
        )
        assert imported.count() == 5
        summaries = sorted(json.loads(bytes(e.content))["already_imported"] for e in results)
        assert summaries == [0, 5]
    assert set(Export.objects.values_list("status", flat=True)) == {"done"}


# --- sessions ----------------------------------------------------------------------------------


@pytest.fixture
def engineers(member: Callable[[Role | str], User]) -> tuple[User, User]:
    return member(Role.ENGINEER), member(Role.ADMIN)


def journal_kinds(session: OptimizationSession) -> list[str]:
    journal = JournalEvent.objects.filter(session_id=session.pk).order_by("seq")
    return list(journal.values_list("kind", flat=True))


def new_session(team: Team, *, paused: bool = False) -> OptimizationSession:
    session = session_create(team=team, user=None, operators=["relu"], start=False)
    if paused:
        session_pause(session=session, user=None)
    return session


CONTROLS = {"pause": session_pause, "resume": session_resume, "stop": session_stop}


@pytest.mark.parametrize(
    ("actions", "paused_first", "done", "end"),
    [
        (("pause", "pause"), False, ["pause"], "paused"),
        (("pause", "stop"), False, ["pause", "stop"], "stopping"),
        (("stop", "pause"), False, ["stop"], "stopping"),
        (("resume", "stop"), True, ["resume", "stop"], "stopping"),
        (("stop", "resume"), True, ["stop"], "stopping"),
        (("resume", "resume"), True, ["resume"], "running"),
        (("stop", "stop"), False, ["stop"], "stopping"),
    ],
)
def test_two_session_controls_at_once_take_effect_one_after_the_other(
    team: Team, engineers: tuple[User, User], actions: tuple[str, str], paused_first: bool,
    done: list[str], end: str,
) -> None:  # fmt: skip
    """race_behind lets the first action go first; the second then acts on what it left."""
    stored_builtin("relu")
    session = new_session(team, paused=paused_first)
    before = journal_kinds(session)
    results = race_behind(
        locked(session),
        *(lambda a=a, u=u: CONTROLS[a](session=session, user=u)
          for a, u in zip(actions, engineers, strict=True)),
    )  # fmt: skip
    assert unexpected(results) == []
    assert [a for a, r in zip(actions, results, strict=True) if not isinstance(r, Conflict)] == done
    session.refresh_from_db()
    assert session.status == end
    kinds = {"pause": "session_paused", "resume": "session_resumed", "stop": "session_stopped"}
    assert journal_kinds(session)[len(before) :] == [kinds[a] for a in done]


def test_a_stop_while_the_session_finishes_leaves_it_finished_once(
    team: Team, engineers: tuple[User, User]
) -> None:
    stored_builtin("relu")
    session = new_session(team)
    OptimizationSession.objects.filter(pk=session.pk).update(status="running")
    results = race_behind(
        locked(session),
        lambda: loop.session_finish(session, "every operator is done"),
        lambda: session_stop(session=session, user=engineers[0]),
    )
    assert unexpected(results) == []
    session.refresh_from_db()
    assert session.status == "finished" and session.finished_at is not None
    assert journal_kinds(session).count("session_finished") == 1


# --- operators ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"name": "Vector add, renamed"}, {"description": "Adds two vectors."}),
        ({"starting_kernels": {"cpu-c": "// one\n"}}, {"starting_kernels": {"cpu-c": "// two\n"}}),
    ],
)
def test_two_edits_of_one_operator_at_once_make_one_version_and_a_conflict(
    team: Team, client_for: Callable[[Role | str], Client], one: dict[str, Any],
    other: dict[str, Any],
) -> None:  # fmt: skip
    first = stored_builtin("vector_add", team)
    clients = client_for(Role.ENGINEER), client_for(Role.ADMIN)
    url = f"/api/teams/{team.slug}/operators/vector_add"
    answers = race_behind(
        locked(first.operator),
        *(lambda c=c, body=body: c.patch(url, body, content_type="application/json")
          for c, body in zip(clients, (one, other), strict=True)),
    )  # fmt: skip
    assert unexpected(answers) == []
    assert sorted(a.status_code for a in answers) == [201, 409]
    refused = next(a for a in answers if a.status_code == 409).json()["error"]
    assert refused["code"] == "conflict" and "is not the newest version" in refused["message"]
    numbers = OperatorVersion.objects.filter(operator=first.operator).values_list("number")
    assert sorted(n for (n,) in numbers) == [1, 2]


def test_the_same_edit_twice_at_once_makes_one_version(team: Team) -> None:
    first = stored_builtin("vector_add", team)
    upload = {"cpu-c": "// the same starting kernel\n"}
    results = race_behind(
        locked(first.operator),
        *(lambda: version_edit(version=first, user=None, starting_kernels=upload)
          for _ in range(2)),
    )  # fmt: skip
    assert unexpected(results) == [] and conflicts(results) == []
    assert results[0][0].pk == results[1][0].pk
    assert sorted(created for _, created in results) == [False, True]
    assert first.operator.versions.count() == 2


def test_one_operator_stored_twice_at_once_is_stored_once(team: Team) -> None:
    """What two imports of one folder do for each problem they share."""
    results = race_behind(locked(team), *(lambda: stored_builtin("relu", team) for _ in range(2)))
    assert unexpected(results) == []
    assert results[0].pk == results[1].pk
    assert Operator.objects.filter(team=team, slug="relu").count() == 1
    assert OperatorVersion.objects.filter(operator__team=team).count() == 1


def test_one_folder_imported_twice_at_once_is_imported_once(team: Team) -> None:
    folder = str(SAMPLES / "npukernelbench" / "level2")
    runs = [import_start(path=folder, fmt=None, scale=1.0, team=team, user=None, restrict=False)
            for _ in range(2)]  # fmt: skip
    results = race_behind(locked(team), *(lambda run=run: import_execute(run) for run in runs))
    assert unexpected(results) == []
    assert sorted(tuple(sorted(summary(r).items())) for r in results) == [
        (("failed", 0), ("imported", 0), ("skipped", 0), ("unchanged", 1)),
        (("failed", 0), ("imported", 1), ("skipped", 0), ("unchanged", 0)),
    ]
    assert OperatorVersion.objects.filter(operator__team=team).count() == 1
    assert Suite.objects.get(team=team).entries.count() == 1


def test_a_suite_set_twice_at_once_holds_one_of_the_lists(team: Team) -> None:
    operators = [stored_builtin(slug, team).operator for slug in ("relu", "vector_add", "gelu")]
    suite = suite_set(team=team, slug="mine", name="Mine", operators=operators)
    lists = (operators[:2], operators[::-1])
    results = race_behind(
        locked(suite),
        *(lambda ops=ops: suite_set(team=team, slug="mine", name="Mine", operators=ops)
          for ops in lists),
    )  # fmt: skip
    assert unexpected(results) == []
    stored = Suite.objects.get(team=team, slug="mine").entries.order_by("position")
    assert [e.operator for e in stored] in [list(ops) for ops in lists]


# --- accounts ----------------------------------------------------------------------------------


def admins_of(team: Team) -> set[str]:
    return set(
        Membership.objects.filter(team=team, role=Role.ADMIN).values_list(
            "user__username", flat=True
        )
    )


def take_away(how: str, team: Team, admin: User) -> Any:
    if how == "removed":
        return membership_remove(team=team, username=admin.username)
    return membership_set(team=team, username=admin.username, role=Role.REVIEWER)


@pytest.mark.parametrize("how", ["demoted", "removed"])
def test_the_last_two_admins_taken_away_at_once_leave_one(how: str) -> None:
    for _ in range(TRIES):
        team = TeamFactory()
        a, b = (MembershipFactory(team=team, role=Role.ADMIN).user for _ in range(2))

        results = race(lambda a=a, team=team: take_away(how, team, a),
                       lambda b=b, team=team: take_away(how, team, b))  # fmt: skip
        assert unexpected(results) == []
        assert len(conflicts(results)) == 1
        assert "must keep at least one admin" in str(conflicts(results)[0])
        assert len(admins_of(team)) == 1


def test_two_admins_setting_one_members_role_at_once_leave_one_membership(team: Team) -> None:
    someone = UserFactory()
    MembershipFactory(team=team, role=Role.ADMIN)
    results = race(*(lambda role=role: membership_set(team=team, username=someone.username,
                                                      role=role)
                     for role in (Role.REVIEWER, Role.ENGINEER)))  # fmt: skip
    assert unexpected(results) == []
    assert Membership.objects.filter(team=team, user=someone).count() == 1


def test_one_token_revoked_twice_at_once_keeps_one_revocation_time(user: User) -> None:
    token = api_token_create(user=user, name="ci").token
    results = race_behind(
        locked(token), *(lambda: api_token_revoke(user=user, token_id=token.pk) for _ in range(2))
    )
    assert unexpected(results) == []
    stored = ApiToken.objects.get(pk=token.pk).revoked_at
    assert stored is not None and [r.revoked_at for r in results] == [stored, stored]


def test_a_team_created_while_another_with_its_slug_is_being_created_is_a_conflict(
    user: User,
) -> None:
    # The test's own transaction inserts the slug first and holds it uncommitted until the
    # racer, past its check that the slug is free, waits on the unique index.
    results: list[Any] = [None]
    with transaction.atomic():
        Team.objects.create(name="Kernel Lab", slug="kernel-lab")
        racer = _racer(lambda: team_create(name="Kernel Lab", owner=user), results, 0,
                       lambda: None)  # fmt: skip
        wait_for_waiters(1)
    _join([racer])
    assert unexpected(results) == []
    assert "A team with the slug 'kernel-lab' already exists." in str(conflicts(results)[0])
    assert Team.objects.filter(slug="kernel-lab").count() == 1
    assert not Membership.objects.filter(team__slug="kernel-lab").exists()


def test_a_launch_sent_again_while_the_first_is_running_is_a_conflict_then_a_replay(
    team: Team,
) -> None:
    # The test holds the team's row, so the first launch, its key claimed, waits to insert
    # its session (the foreign key takes a share lock on the team) while the retry arrives.
    stored_builtin("relu")
    engineer = MembershipFactory(team=team, role=Role.ENGINEER).user
    token = api_token_create(user=engineer, name="ci").plaintext

    def launch() -> Any:
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client.post(f"/api/teams/{team.slug}/sessions", {"operators": ["relu"]},
                           content_type="application/json",
                           headers={"Idempotency-Key": "nightly-42"})  # fmt: skip

    results: list[Any] = [None, None]
    with transaction.atomic():
        list(locked(team).select_for_update())
        first = _racer(launch, results, 0, lambda: None)
        wait_for_waiters(1)
        _join([_racer(launch, results, 1, lambda: None)])
    _join([first])
    retry_after = launch()

    assert [r.status_code for r in results] == [201, 409], [r.content for r in results]
    assert "still being answered" in results[1].json()["error"]["message"]
    assert retry_after.status_code == 201 and retry_after.content == results[0].content
    assert OptimizationSession.objects.filter(team=team).count() == 1
