"""Running an import: find the problems in a folder, store each, report on each.

Each problem is stored in its own transaction (services.version_store), so a problem that
fails leaves nothing behind and the rest of the import goes on. One process at a time holds a
run (an advisory lock, which the database lets go when that process dies): a run whose worker
died is taken up again, by the next agent worker to connect, where its report ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import Truncator, slugify

from apps.accounts.models import Team
from apps.core.errors import DomainError
from apps.core.locks import advisory_lock, advisory_locks_held
from apps.operators import archives
from apps.operators.definitions import OperatorDefinition
from apps.operators.importers import kernelbench, npukernelbench
from apps.operators.importers.common import FoundProblem
from apps.operators.models import ImportRun, Operator, OperatorVersion, Suite, SuiteEntry
from apps.operators.sandbox import ReferenceRunError, run_reference
from apps.operators.services import (
    CasesFailed,
    ImportProblem,
    KeptCases,
    case_unsupported_targets,
    existing_version,
    kept_cases,
    suite_set,
    version_store,
    with_setting_attributes,
    with_timing_case,
)

logger = logging.getLogger(__name__)

FORMATS = ("kernelbench", "npukernelbench")
IMPORTED, UNCHANGED, SKIPPED, FAILED = "imported", "unchanged", "skipped", "failed"
MAX_PATH_CHARS = 500  # ImportRun.path
LOWERED_TARGET = "cpu-c"  # the target imported problems get a starting kernel for
LOCK_NAMESPACE = 7_002  # pg_advisory_lock(namespace, import run id); sessions' is 7_001


class ImportRequestError(DomainError):
    code = "import_invalid"
    status = 400

    def __init__(self, message: str, *, field: str = "path") -> None:
        super().__init__(message)
        self.field = field  # the import form's field at fault


@dataclass(frozen=True)
class ReportLine:
    problem: str  # path relative to the import folder
    outcome: str  # imported | unchanged | skipped | failed
    reason: str = ""
    operator: str = ""
    version: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"problem": self.problem, "outcome": self.outcome, "reason": self.reason,
                "operator": self.operator, "version": self.version}  # fmt: skip


# What each layout's problems hold, and how to name them: the first that matches is the format.
LAYOUTS = {
    "npukernelbench": ("validation/module.py", "NPUKernelBench operators"),
    "kernelbench": ("*.py", "KernelBench problems"),
}


def has_layout(root: Path, fmt: str) -> bool:
    return next(root.rglob(LAYOUTS[fmt][0]), None) is not None


def detect_format(root: Path) -> str:
    found = next((fmt for fmt in LAYOUTS if has_layout(root, fmt)), None)
    if found is None:
        raise ImportRequestError(
            f"{root} holds neither NPUKernelBench operators (validation/module.py) nor "
            "KernelBench problems (*.py)"
        )
    return found


def checked_folder(path: str, *, restrict: bool) -> Path:
    """The folder to import, resolved; under KOPE_IMPORT_ROOTS when `restrict` (checked
    first, so a refused path tells nothing about what exists outside the roots)."""
    try:
        root = Path(path).expanduser().resolve()
        if restrict and not any(root.is_relative_to(r) for r in settings.KOPE_IMPORT_ROOTS):
            allowed = ", ".join(str(r) for r in settings.KOPE_IMPORT_ROOTS)
            raise ImportRequestError(
                f"{path[:200]} is outside the import roots ({allowed}; KOPE_IMPORT_ROOTS)"
            )
        if not root.is_dir():
            raise ImportRequestError(f"{path[:200]} is not a folder on this server")
        if not is_utf8(str(root)):  # the run keeps its path as PostgreSQL text
            raise ImportRequestError(f"{path[:200]!r} is not a usable path: it is not UTF-8")
        if len(str(root)) > MAX_PATH_CHARS:  # a link's target, or ~, may be longer than it
            raise ImportRequestError(f"{path[:200]} leads to a path of {len(str(root))} "
                                     f"characters; at most {MAX_PATH_CHARS} are kept")  # fmt: skip
    except (OSError, ValueError) as error:  # a name too long, a NUL byte
        reason = getattr(error, "strerror", None) or str(error)
        raise ImportRequestError(f"{path[:200]!r} is not a usable path: {reason}") from None
    return root


def is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a name's bytes that are not UTF-8, kept as surrogates
        return False
    return True


def import_start(
    *,
    path: str,
    fmt: str | None,
    scale: float,
    team: Team | None,
    user: User | None,
    restrict: bool = True,
) -> ImportRun:
    """Check the request and record the import; import_execute then does the work."""
    root = checked_folder(path, restrict=restrict)
    if fmt is not None and fmt not in FORMATS:
        raise ImportRequestError(f"format {fmt!r} is not one of {', '.join(FORMATS)}",
                                 field="format")  # fmt: skip
    if not 0 < scale <= 1:
        raise ImportRequestError(f"scale {scale:g} must be above 0 and at most 1", field="scale")
    if fmt is None:
        fmt = detect_format(root)
    elif not has_layout(root, fmt):
        pattern, problems = LAYOUTS[fmt]
        raise ImportRequestError(f"{root} holds no {problems} ({pattern})")
    if fmt == "npukernelbench" and scale != 1:
        raise ImportRequestError(
            f"scale {scale:g} applies to KernelBench problems only; NPUKernelBench cases state "
            "their sizes", field="scale",
        )  # fmt: skip
    return ImportRun.objects.create(
        team=team, created_by=user, path=str(root), format=fmt, scale=scale
    )


def import_start_from_archive(
    *, archive: IO[bytes], name: str, size: int | None, fmt: str | None, scale: float,
    team: Team | None, user: User | None,
) -> ImportRun:  # fmt: skip
    """Unpack an uploaded archive (apps/operators/archives) into a fresh folder and start its
    import as import_start does a folder's; the folder goes when the import ends
    (`_finish`), or at once when the archive or the request is refused."""
    limits = archives.Limits.from_settings()
    try:
        archives.check_size(name, size, limits)
        folder = archives.fresh_folder()
    except archives.ArchiveRefused as refused:
        raise ImportRequestError(refused.message, field="archive") from None
    root = folder / archives.folder_name(name)
    try:
        archives.unpack(archive, name, root, limits)
        return import_start(path=str(root), fmt=fmt, scale=scale, team=team, user=user,
                            restrict=False)  # fmt: skip
    except archives.ArchiveRefused as refused:
        shutil.rmtree(folder, ignore_errors=True)
        raise ImportRequestError(refused.message, field="archive") from None
    except ImportRequestError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise ImportRequestError(error.message.replace(str(root), name),
                                 field="archive" if error.field == "path" else error.field,
                                 ) from None  # fmt: skip
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def import_enqueue(run: ImportRun) -> None:
    """Send the import to the agent worker once the run is committed. A broker that refuses
    the message must not answer 500 and leave the run "running" with no worker ever to do
    it: the run fails with the reason, to be started again."""
    from apps.operators.tasks import import_folder  # the task runs import_execute, below

    def send() -> None:
        try:
            import_folder.delay(run.pk)
        except Exception as error:  # kombu's OperationalError (Redis), ChannelError (folder)
            logger.exception("import %s: the broker refused it", run.pk)
            _finish(run, ImportRun.Status.FAILED, error=f"the agent worker's queue refused it "
                    f"({type(error).__name__}); start the import again")  # fmt: skip

    transaction.on_commit(send)


def discover(root: Path, fmt: str, scale: float) -> list[FoundProblem]:
    found = (
        kernelbench.discover(root, scale=scale)
        if fmt == "kernelbench"
        else npukernelbench.discover(root)
    )
    return sorted(found, key=lambda f: f.sort_key)


Progress = Callable[[ImportRun, ReportLine], None]


def import_execute(run: ImportRun, *, on_progress: Progress | None = None) -> ImportRun:
    """Import the run's folder, unless another process holds the run or it is over. A run
    taken up again keeps the report lines of the problems its dead worker got through."""
    with import_lock(run.pk) as held:
        run.refresh_from_db()
        if not held or run.status != ImportRun.Status.RUNNING:
            return run
        return _import_held(run, on_progress)


def import_lock(run_id: int) -> contextlib.AbstractContextManager[bool]:
    return advisory_lock(LOCK_NAMESPACE, run_id)


def imports_held() -> set[int]:
    """The runs a process imports now."""
    return advisory_locks_held(LOCK_NAMESPACE)


def _import_held(run: ImportRun, on_progress: Progress | None) -> ImportRun:
    try:
        found = discover(Path(run.path), run.format, run.scale)
    except OSError as error:
        return _finish(run, ImportRun.Status.FAILED, error=f"cannot read {run.path}: {error}")
    except SoftTimeLimitExceeded:
        raise
    except Exception as error:  # a bug in a layout's reader must not leave the run "running"
        logger.exception("listing the problems of %s failed", run.path)
        return _finish(run, ImportRun.Status.FAILED, error=f"could not list the problems in "
                       f"{run.path}: {type(error).__name__}: {error}")  # fmt: skip
    kept = _lines_kept(run, found)
    run.total, run.done, run.report = len(found), len(kept), kept
    run.save(update_fields=["total", "done", "report"])
    claimed: dict[str, str] = {}  # slug -> the problem that took it in this import
    for kept_line in kept:
        if kept_line["operator"]:
            claimed.setdefault(kept_line["operator"], kept_line["problem"])
    slugs = [line["operator"] for line in kept if line["outcome"] in (IMPORTED, UNCHANGED)]
    by_slug = {o.slug: o for o in Operator.objects.filter(team=run.team, slug__in=slugs)}
    stored = [by_slug[slug] for slug in slugs if slug in by_slug]  # one deleted since is not
    for problem in found[len(kept) :]:
        if started_before(run) >= settings.KOPE_IMPORT_MAX_ATTEMPTS:
            line = left_out(problem, deaths=run.attempts)
        else:
            attempt_counted(run)
            line = import_one(problem, run, claimed)
        if line.outcome in (IMPORTED, UNCHANGED):
            stored.append(Operator.objects.get(team=run.team, slug=line.operator))
        run.done += 1
        run.report = [*run.report, line.as_json()]
        run.save(update_fields=["done", "report"])
        if on_progress:
            on_progress(run, line)
    if stored:
        _suite_for(run, stored)
    return _finish(run, ImportRun.Status.DONE)


def _lines_kept(run: ImportRun, found: list[FoundProblem]) -> list[dict[str, Any]]:
    """The report lines of a run taken up again after its worker died, while its problems are
    still the folder's first ones in the same order; else none, and the import starts over
    (importing a problem again changes nothing)."""
    kept = run.report[: run.done]
    if [line["problem"] for line in kept] != [problem.label for problem in found[: len(kept)]]:
        return []
    return list(kept)


def import_one(problem: FoundProblem, run: ImportRun, claimed: dict[str, str]) -> ReportLine:
    if problem.skip_reason:
        return ReportLine(problem.label, SKIPPED, problem.skip_reason)
    if problem.definition is None:
        return ReportLine(problem.label, FAILED, problem.failure)
    slug = problem.definition.spec.slug
    if slug in claimed:
        return ReportLine(problem.label, FAILED, f"its name gives the slug {slug}, which "
                          f"{claimed[slug]} already has in this import", operator=slug)  # fmt: skip
    claimed[slug] = problem.label
    try:
        version, created, notes = store_problem(problem, team=run.team, user=run.created_by)
    except ImportProblem as error:
        return ReportLine(problem.label, FAILED, error.message, operator=slug)
    except SoftTimeLimitExceeded:
        raise  # the task's time is up (KOPE_TASK_TIME_LIMIT), not the problem's: it goes on
    except Exception as error:  # a bug here must not end the whole import
        logger.exception("importing %s failed", problem.label)
        return ReportLine(problem.label, FAILED, f"internal error: {error}", operator=slug)
    reason = "; ".join(n for n in [*notes, _note(version)] if n) if created else ""
    return ReportLine(problem.label, IMPORTED if created else UNCHANGED, reason, operator=slug,
                      version=version.number)  # fmt: skip


def store_problem(
    problem: FoundProblem, *, team: Team | None, user: User | None
) -> tuple[OperatorVersion, bool, list[str]]:
    """Store the problem's definition, or the first of its fallbacks whose reference runs its
    timing case, with the cases the reference ran (services.kept_cases); the version, whether
    it is new, and what the report should say about sizes and cases left out. ImportProblem
    when none can be stored, naming what failed at each size tried."""
    first = problem.definition
    assert first is not None
    if found := existing_version(team, first):
        return found, False, []
    tried: list[str] = []
    for candidate in (first, *problem.fallbacks):
        try:
            kept = in_float32_where_halves(kept_cases(candidate))
        except CasesFailed as failure:
            tried.append(f"at {kernelbench.sizes_label(candidate)}: {failure.message}")
            if "ran out of memory" in failure.message:  # larger sizes only need more
                break
            continue
        kept = with_timing_case(kept)
        settled = with_setting_attributes(kept.definition, kept.outcomes)
        definition, no_start = with_lowered_start(settled, kept.outcomes)
        version, created = version_store(team=team, definition=definition,
                                         outcomes=kept.outcomes, created_by=user,
                                         content_hash=candidate.content_hash())  # fmt: skip
        sizes = [f"imported at {kernelbench.sizes_label(candidate)}, the reference failing "
                 + "; ".join(tried)] if tried else []  # fmt: skip
        ran_as = [f"case {case.case_id} runs as {case.params[npukernelbench.RUN_AS]}"
                  for case in kept.definition.spec.cases
                  if candidate.reference_kind == "npukernelbench"
                  and npukernelbench.RUN_AS in case.params]  # fmt: skip
        notes = [*sizes, *problem.left_out, *kept.left_out, *ran_as, no_start]
        return version, created, [note for note in notes if note]
    if len(tried) == 1:
        raise ImportProblem(tried[0].split(": ", 1)[1])
    raise ImportProblem("the reference fails at every size tried: " + "; ".join(tried))


def with_lowered_start(
    definition: OperatorDefinition, outcomes: list[dict[str, Any]]
) -> tuple[OperatorDefinition, str]:
    """The definition with a naive starting kernel for LOWERED_TARGET, its reference Model
    lowered to C in the sandbox (apps/operators/lowering), so the offline policy can start on
    an imported problem; else the report's note saying what stopped the lowering."""
    if LOWERED_TARGET in definition.starting_kernels:
        return definition, ""
    request = definition.runner_request() | {"mode": "lower"}
    cases = zip(definition.spec.cases, outcomes, strict=True)
    supported = {
        case.case_id
        for case, outcome in cases
        if LOWERED_TARGET not in case_unsupported_targets(case.dtype, outcome)
    }
    shapes = {case.case_id: [t["shape"] for t in outcome["outputs"]]
              for case, outcome in zip(definition.spec.cases, outcomes, strict=True)}  # fmt: skip
    request["cases"] = [c | {"outputs": shapes[c["case_id"]]} for c in request["cases"]
                        if c["case_id"] in supported]  # fmt: skip
    if not request["cases"]:
        return definition, f"no starting kernel: no case {LOWERED_TARGET} can represent"
    try:
        answer = run_reference(request)
    except ReferenceRunError as error:
        return definition, f"no starting kernel: {error}"
    kernels = {**definition.starting_kernels, LOWERED_TARGET: answer["source"]}
    left_out = "; ".join(answer.get("left_out", []))
    note = f"the starting kernel leaves out some kinds of call: {left_out}" if left_out else ""
    return replace(definition, starting_kernels=kernels), note


def in_float32_where_halves(kept: KeptCases) -> KeptCases:
    """An NPUKernelBench case whose reference makes float16 or bfloat16 tensors though its row
    names no such dtype (a problem that fixes it) is run again as float32, as the rows that
    name one are (npukernelbench's docstring says why)."""
    definition = kept.definition
    halves = {case.case_id: dtype for case, outcome in zip(definition.spec.cases, kept.outcomes,
                                                           strict=True)
              if npukernelbench.RUN_AS not in case.params
              and (dtype := _half_dtype(outcome))}  # fmt: skip
    if definition.reference_kind != "npukernelbench" or not halves:
        return kept
    run_as = {case_id: f"float32 (the reference makes {dtype})" for case_id, dtype in
              halves.items()}  # fmt: skip
    cases = [replace(case, dtype="float32", params={**case.params, npukernelbench.RUN_AS:
                                                    run_as[case.case_id]})
             if case.case_id in run_as else case for case in definition.spec.cases]  # fmt: skip
    again = kept_cases(replace(definition, spec=replace(definition.spec, cases=cases)))
    return replace(again, left_out=[*kept.left_out, *again.left_out])


def _half_dtype(outcome: dict[str, Any]) -> str:
    dtypes = [t["dtype"] for t in outcome["inputs"] + outcome["outputs"] if "dtype" in t]
    return next((d for d in dtypes if d in npukernelbench.HALF_DTYPES), "")


def started_before(run: ImportRun) -> int:
    """How often a process started importing the run's next problem and died before it was
    reported (killed, out of memory): the run was taken up again where its report ends."""
    return run.attempts if run.attempts_at == run.done else 0


def attempt_counted(run: ImportRun) -> None:
    run.attempts, run.attempts_at = started_before(run) + 1, run.done
    run.save(update_fields=["attempts", "attempts_at"])


def left_out(problem: FoundProblem, *, deaths: int) -> ReportLine:
    """A problem the import stopped on each time: taken up again for ever, it held the rest of
    the folder back and killed a worker each time."""
    slug = problem.definition.spec.slug if problem.definition else ""
    return ReportLine(problem.label, FAILED, f"left out: the import stopped on it {deaths} "
                      "times (its worker killed, out of memory or out of task time); import it "
                      "alone to see why", operator=slug)  # fmt: skip


def _note(version: Any) -> str:
    unsupported = [c for c in version.cases.all() if c.unsupported_targets]
    if not unsupported:
        return ""
    targets = sorted({t for c in unsupported for t in c.unsupported_targets})
    return (
        f"{len(unsupported)} of {version.cases.count()} cases unsupported on {', '.join(targets)}"
    )


def _suite_for(run: ImportRun, operators: list[Operator]) -> None:
    folder = Path(run.path).name
    slug = _suite_slug(run)
    suffix = f" ({run.format})"  # a folder's name may be 255 characters; Suite.name holds 200
    name = Truncator(folder).chars(200 - len(suffix)) + suffix
    if any(line["outcome"] == FAILED for line in run.report):
        operators = _with_those_held(run.team, slug, operators)
    suite_set(team=run.team, slug=slug, name=name, operators=operators,
              description=f"Imported from {run.path}.", source=run.path)  # fmt: skip


def _suite_slug(run: ImportRun) -> str:
    """`<format>-<folder name>`, unless a suite of that slug from another folder (kb-v1/level1
    and kb-v2/level1) is one the run's team sees or, for a shared suite, one a team's would
    hide it behind: then with a digest of the folder's path, so no import takes over or hides
    another folder's suite. A folder keeps the slug it got first; a suite with no source (made
    before sources were kept) is taken as this folder's."""
    plain = slugify(f"{run.format}-{Path(run.path).name}")[:64]
    digest = hashlib.sha256(run.path.encode()).hexdigest()[:8]
    digested = f"{plain[:55].rstrip('-')}-{digest}"
    own = Suite.objects.filter(team=run.team, source=run.path, slug__in=[plain, digested])
    if own.exists():
        return own.values_list("slug", flat=True)[0]
    seen = Suite.objects.filter(slug=plain)
    if run.team is not None:
        seen = seen.filter(Q(team=run.team) | Q(team__isnull=True))
    return digested if seen.exclude(source__in=["", run.path]).exists() else plain


def _with_those_held(team: Team | None, slug: str, operators: list[Operator]) -> list[Operator]:
    """The suite's operators, then the import's new ones: a problem that failed (a reference
    that timed out once) stored nothing and keeps its place. Only an import where nothing
    failed leaves out what is no longer in the folder."""
    entries = SuiteEntry.objects.filter(suite__team=team, suite__slug=slug)
    held = [entry.operator for entry in entries.select_related("operator")]
    return held + [operator for operator in operators if operator not in held]


def _finish(run: ImportRun, status: str, *, error: str = "") -> ImportRun:
    run.status, run.error, run.finished_at = status, error, timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])
    archives.upload_folder_remove(run.path)  # an uploaded archive's: read, and no longer needed
    return run


def summary(run: ImportRun) -> dict[str, int]:
    counts = {IMPORTED: 0, UNCHANGED: 0, SKIPPED: 0, FAILED: 0}
    for line in run.report:
        counts[line["outcome"]] += 1
    return counts
