"""Evaluations: one per (candidate, operator version, target, options), run by a device worker."""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import F
from django.utils import timezone

from apps.accounts.models import Team
from apps.accounts.roles import Permission
from apps.accounts.selectors import membership_for
from apps.core.errors import DomainError
from apps.core.events import EvaluationStatus, EventKind, evaluation_group, publish_quietly
from apps.core.kernel_input import MAX_SOURCE_BYTES
from apps.core.locks import advisory_lock, advisory_locks_held
from apps.devices.evaluator import (
    TARGET,
    EvalSettings,
    EvaluationError,
    OperatorUnderTest,
    default_work_dir,
)
from apps.devices.models import Evaluation, KernelSource, KernelTrial, Profile
from apps.devices.targets import TARGETS, target_get
from apps.operators.models import OperatorCase, OperatorVersion
from apps.operators.services import tensors_bytes
from apps.operators.spec import spec_from_json
from apps.sandbox.workdirs import remove_abandoned

# pg_advisory_lock(namespace, evaluation id): held by the process running the evaluation, a
# worker's or `manage.py evaluate`'s; sessions' is 7_001, imports' 7_002.
LOCK_NAMESPACE = 7_003
LOCK_WAIT_POLL_S = 0.5
# What an evaluation's steps name their work dirs: the evaluation's own (a Workspace), then
# those of the compile, the symbol check, a profile or debug run and the reference run. Nothing
# broader: `make load` keeps its whole stack in /tmp/kope-load-*.
WORK_DIR_PREFIXES = ("kope-eval-", "kope-build-", "kope-vet-", "kope-profile-", "kope-debug-",
                     "kope-ref-")  # fmt: skip

logger = logging.getLogger(__name__)


def kernel_source_store(text: str) -> KernelSource:
    try:
        encoded = text.encode()
    except UnicodeEncodeError as error:  # a lone surrogate, as JSON's \ud800 gives
        reason = f"the kernel is not valid Unicode text (character {error.start})"
        raise DomainError(reason) from None
    if len(encoded) > MAX_SOURCE_BYTES:
        raise DomainError(f"the kernel is {len(encoded)} bytes; the limit is {MAX_SOURCE_BYTES}")
    if b"\x00" in encoded:
        raise DomainError(f"the kernel holds a NUL character (byte {encoded.index(0)})")
    source, _ = KernelSource.objects.get_or_create(sha256=KernelSource.digest_of(text),
                                                   defaults={"text": text})  # fmt: skip
    return source


@transaction.atomic
def evaluation_request(
    *,
    version: OperatorVersion,
    source_text: str,
    options: EvalSettings,
    team: Team | None = None,
    user: User | None = None,
    target: str = TARGET,
    rerun: bool = False,
) -> tuple[Evaluation, bool]:
    """The stored evaluation for this key; a new (or reset, with `rerun`) one to run otherwise."""
    target_get(target)
    options.check()
    source = kernel_source_store(source_text)
    evaluation, created = Evaluation.objects.select_for_update().get_or_create(
        source=source, version=version, target=target, options_key=options.key(),
        defaults={"options": options.as_json(), "team": team, "created_by": user},
    )  # fmt: skip
    # A failed evaluation is no verdict on the candidate: asking again tries again.
    again = rerun or evaluation.status == Evaluation.Status.FAILED
    if again and not created and evaluation.status != Evaluation.Status.RUNNING:
        evaluation.status, evaluation.attempts, evaluation.verdict = (
            Evaluation.Status.QUEUED,
            0,
            None,
        )
        evaluation.error, evaluation.finished_at = "", None
        evaluation.save()
        evaluation.profiles.all().delete()
        status_announce(evaluation)
        return evaluation, True
    return evaluation, created


def operator_under_test(version: OperatorVersion) -> OperatorUnderTest:
    cases = [
        {"case_id": c.case_id, "params": c.params, "dtype": c.dtype, "timing": c.timing,
         "unsupported_targets": c.unsupported_targets, "bytes": case_bytes(c)}
        for c in version.cases.all()
    ]  # fmt: skip
    check = "custom_check_precision" in str(version.reference_source.get("prepare_inputs", ""))
    return OperatorUnderTest(
        label=f"{version.operator.slug} v{version.number}", spec=spec_from_json(version.spec),
        reference_kind=version.reference_kind, reference_source=version.reference_source,
        cases=cases, has_custom_check=check,
    )  # fmt: skip


def case_bytes(case: OperatorCase) -> int:
    """A case's inputs and outputs, from the shapes its reference recorded (0: not recorded)."""
    return tensors_bytes([*(case.inputs or []), *(case.outputs or [])])


def claim_attempt(
    evaluation_id: int, max_attempts: int, worker: str = "", *, only_if_queued: bool = False
) -> Evaluation | None:
    """Count this attempt and name its worker; None when the evaluation is finished, has used
    up its attempts, or (`only_if_queued`) a worker has it already."""
    with transaction.atomic():
        evaluation = Evaluation.objects.select_for_update().get(pk=evaluation_id)
        if evaluation.status in (Evaluation.Status.DONE, Evaluation.Status.FAILED):
            return None
        if only_if_queued and evaluation.status != Evaluation.Status.QUEUED:
            return None
        if evaluation.attempts >= max_attempts:
            evaluation_fail(evaluation, f"gave up after {evaluation.attempts} attempts: the "
                            "worker stopped during each (killed, or out of memory)")  # fmt: skip
            return None
        Evaluation.objects.filter(pk=evaluation.pk).update(
            attempts=F("attempts") + 1, status=Evaluation.Status.RUNNING,
            started_at=timezone.now(), worker=worker[:200],
        )  # fmt: skip
        evaluation.refresh_from_db()
        status_announce(evaluation)
    return evaluation


def evaluation_execute(
    evaluation_id: int, *, max_attempts: int, worker: str = "", only_if_queued: bool = False
) -> Evaluation:
    """Run the evaluation holding its lock for the whole attempt, so that an orphan sweep
    sees it alive whichever process runs it (a worker, `manage.py evaluate`, on any host).
    When another process runs it already, wait for that one's verdict instead of running it
    beside it; `only_if_queued` returns at once then."""
    with evaluation_lock(evaluation_id, wait=not only_if_queued) as held:
        if not held:
            return Evaluation.objects.get(pk=evaluation_id)
        return _execute_locked(evaluation_id, max_attempts, worker, only_if_queued)


@contextlib.contextmanager
def evaluation_lock(evaluation_id: int, *, wait: bool) -> Iterator[bool]:
    """Taken before the attempt is claimed and let go after its verdict is stored: an
    evaluation seen running stays locked until it is not, or its process has died."""
    while True:
        with advisory_lock(LOCK_NAMESPACE, evaluation_id) as held:
            if held or not wait:
                yield held
                return
        time.sleep(LOCK_WAIT_POLL_S)


def _execute_locked(
    evaluation_id: int, max_attempts: int, worker: str, only_if_queued: bool
) -> Evaluation:
    evaluation = claim_attempt(evaluation_id, max_attempts, worker, only_if_queued=only_if_queued)
    if evaluation is None:
        return Evaluation.objects.get(pk=evaluation_id)
    options = EvalSettings.from_json(evaluation.options)
    operator = operator_under_test(evaluation.version)
    evaluate = target_get(evaluation.target).evaluate
    try:
        if options.baseline_sha256:
            verdict = evaluate(operator, evaluation.source.text, options,
                               baseline_source=baseline_text(options.baseline_sha256))  # fmt: skip
        else:
            verdict = evaluate(operator, evaluation.source.text, options)
    except EvaluationError as error:
        return evaluation_fail(evaluation, str(error))
    except (OperationalError, InterfaceError):
        raise  # the database is away: the task waits for it and runs this attempt again
    except Exception as error:
        # A fault of the evaluator's own, maybe triggered by what the candidate printed: fail
        # with it now. Left running, the evaluation would be taken for a dead worker's.
        logger.exception("evaluation %s failed in the evaluator", evaluation_id)
        reason = f"the evaluator failed ({type(error).__name__}: {error})"[:2000]
        return evaluation_fail(evaluation, f"{reason}; the candidate was not judged")
    return evaluation_record(evaluation, verdict)


def baseline_text(sha256: str) -> str:
    stored = KernelSource.objects.filter(sha256=sha256).first()
    if stored is None:
        raise EvaluationError(f"the baseline kernel {sha256[:12]} is not stored")
    return stored.text


def orphaned_evaluations(queue: str) -> list[int]:
    """The evaluations for `queue` marked running whose process is gone (SIGKILL, a lost
    host): nobody holds their lock, which PostgreSQL lets go when its holder's connection
    ends. Read in that order: a runner takes the lock before it marks the evaluation running,
    so one seen running and then unlocked has finished or died."""
    targets = [name for name, target in TARGETS.items() if target.queue == queue]
    running = Evaluation.objects.filter(status=Evaluation.Status.RUNNING, target__in=targets)
    running_ids = list(running.order_by("pk").values_list("pk", flat=True))
    held = advisory_locks_held(LOCK_NAMESPACE)
    return [pk for pk in running_ids if pk not in held]


def work_dirs_abandoned_remove() -> list[Path]:
    """Remove the work dirs that dead evaluations left (their process killed mid-way, so its
    clean-up never ran) where the evaluator makes them: KOPE_EVAL_WORK_DIR, /dev/shm and the
    system temp folder. Those a live process holds (another worker, `manage.py evaluate`) stay."""
    temp = tempfile.gettempdir()
    bases = [settings.KOPE_EVAL_WORK_DIR, default_work_dir(), temp]
    return remove_abandoned([base for base in bases if base], WORK_DIR_PREFIXES)


def json_safe(value: Any) -> Any:
    """The verdict as JSON PostgreSQL accepts: an error of infinity (a NaN or a missing output)
    becomes the string "inf" ("-inf", "nan"), which JSON has no number for."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def still_its_attempt(evaluation: Evaluation) -> bool:
    """Lock the row; True while this attempt is the latest one and unfinished. A worker that
    was taken for dead and then finished anyway must not write over the next attempt."""
    current = Evaluation.objects.select_for_update().filter(pk=evaluation.pk).first()
    return (
        current is not None
        and current.status == Evaluation.Status.RUNNING
        and current.attempts == evaluation.attempts
    )


@transaction.atomic
def evaluation_record(evaluation: Evaluation, verdict: dict[str, Any]) -> Evaluation:
    if evaluation.status == Evaluation.Status.RUNNING and not still_its_attempt(evaluation):
        return Evaluation.objects.get(pk=evaluation.pk)
    verdict = json_safe(verdict)
    profiled = verdict.get("profiled")
    if profiled and profiled.get("ok"):
        stored = Profile.objects.create(evaluation=evaluation, tool=profiled["profile"]["tool"],
                                        case_id=profiled["case_id"], data=profiled["profile"],
                                        trace=profiled["trace"])  # fmt: skip
        verdict["profiled"] = {"ok": True, "profile_id": stored.pk, "case_id": profiled["case_id"],
                               "totals": profiled["profile"].get("totals", {})}  # fmt: skip
    evaluation.verdict = verdict
    evaluation.status, evaluation.finished_at = Evaluation.Status.DONE, timezone.now()
    evaluation.save(update_fields=["verdict", "status", "finished_at"])
    status_announce(evaluation)
    return evaluation


@transaction.atomic
def evaluation_fail(evaluation: Evaluation, reason: str) -> Evaluation:
    if evaluation.status == Evaluation.Status.RUNNING and not still_its_attempt(evaluation):
        return Evaluation.objects.get(pk=evaluation.pk)
    evaluation.status, evaluation.error = Evaluation.Status.FAILED, reason
    evaluation.finished_at = timezone.now()
    evaluation.save(update_fields=["status", "error", "finished_at"])
    status_announce(evaluation)
    return evaluation


def status_announce(evaluation: Evaluation) -> None:
    """Tell the evaluation's watchers (a trial's page) its new status once it is committed;
    they read the row again, so a message lost while the channel layer was away costs only
    its liveness: the page shows the same on a reload, and the socket sends it on connect."""
    payload = EvaluationStatus(evaluation=evaluation.pk, status=evaluation.status)
    group = evaluation_group(evaluation.pk)
    transaction.on_commit(lambda: publish_quietly(group, EventKind.EVALUATION_STATUS, payload))


def evaluation_start(**request: Any) -> Evaluation:
    """Request an evaluation and, when it has to run, queue it for a device worker.

    One found still queued is queued again: whoever asked for it may have been killed between
    storing it and sending its message (a replayed iteration asks again). That message only
    runs it while it is still queued, so the usual case, both messages in the queue, runs it
    once."""
    from apps.devices.tasks import evaluate

    evaluation, to_run = evaluation_request(**request)
    if to_run or evaluation.status == Evaluation.Status.QUEUED:
        queue = target_get(evaluation.target).queue
        again = {} if to_run else {"only_if_queued": True}
        transaction.on_commit(
            lambda: evaluate.apply_async(args=(evaluation.pk,), kwargs=again, queue=queue)
        )
    return evaluation


TRIAL_TARGET = "cpu-c"  # the operator page evaluates C kernels, as a session's default target


@transaction.atomic
def kernel_trial_start(
    *, team: Team, user: User, version: OperatorVersion, source_text: str, name: str
) -> KernelTrial:
    """Have a member's own kernel evaluated on `version` by a device worker, with the
    deployment's measurement settings; who may launch sessions may do this."""
    membership_for(user, team.slug, Permission.RUN)
    evaluation = evaluation_start(version=version, source_text=source_text,
                                  options=EvalSettings.from_settings(), team=team, user=user,
                                  target=TRIAL_TARGET)  # fmt: skip
    return KernelTrial.objects.create(team=team, evaluation=evaluation, name=name[:200],
                                      created_by=user)  # fmt: skip
