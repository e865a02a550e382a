"""Storing operators: every stored version was run through its reference first."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max

from apps.accounts.models import Team
from apps.core.errors import Conflict, DomainError
from apps.operators.builtin_suite import BUILTIN_SUITE_SLUG, builtin_definition, read_builtin_suite
from apps.operators.definitions import OperatorDefinition
from apps.operators.models import (
    Operator,
    OperatorCase,
    OperatorVersion,
    StartingKernel,
    Suite,
    SuiteEntry,
)
from apps.operators.sandbox import ReferenceRunError, run_reference, run_reference_batch
from apps.operators.spec import (
    CASE_DTYPE,
    DTYPES,
    PER_CASE,
    AttributeSpec,
    CaseSpec,
    OperatorSpec,
    SpecError,
    TensorSpec,
    spec_from_json,
    validate,
)
from apps.operators.targets import TARGET_DTYPES, unsupported_targets


class ImportProblem(DomainError):
    """An operator that cannot be stored; the message says why (and which case)."""

    code = "import_failed"


def reference_answer(definition: OperatorDefinition) -> dict[str, Any]:
    """The sandboxed child's answer for every case, each case's error kept in its answer;
    ImportProblem when the child failed as a whole (timed out, out of memory, crashed)."""
    try:
        return run_reference(definition.runner_request())
    except ReferenceRunError as error:
        raise ImportProblem(str(error)) from None


def case_outcomes(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """What each case produced, or ImportProblem naming the first case that failed."""
    if "error" in answer:
        raise ImportProblem(answer["error"])
    for case in answer["cases"]:
        if reason := case_failure(case):
            raise ImportProblem(f"case {case['case_id']}: {reason}")
    return list(answer["cases"])


def case_failure(case: dict[str, Any]) -> str:
    """Why a case's outcome cannot be stored, or ""."""
    if case.get("error"):
        return str(case["error"])
    for position, value in enumerate(case["inputs"]):
        # A scalar input becomes an attribute of the operator, stored as JSON: inf and nan
        # have no JSON form, and a kernel told one as a size or a factor has nothing sound to do.
        if "scalar" in value and not math.isfinite(value["value"]):
            return (f"input {position} of the reference is the scalar {value['value']}; a "
                    "scalar input becomes an attribute, which must be finite")  # fmt: skip
    held = [t["dtype"] for t in case["inputs"] + case["outputs"] if "dtype" in t]
    if strange := next((dtype for dtype in held if dtype not in DTYPES), None):
        return f"{strange} cannot be represented on {', '.join(TARGET_DTYPES)}"
    return ""


class CasesFailed(ImportProblem):
    """The reference failed on a case the operator cannot do without: its timing case, or all
    of them. `reasons` has a line per case that failed."""

    def __init__(self, reasons: list[str], *, timing: list[str]) -> None:
        named = timing or reasons
        super().__init__(named[0] if len(named) == 1 else "; ".join(named))
        self.reasons = reasons


@dataclass(frozen=True)
class KeptCases:
    definition: OperatorDefinition  # with the cases the reference ran
    outcomes: list[dict[str, Any]]
    left_out: list[str]  # "left out case 7: <why>", one per case left out


TIMING_CASE_BYTES = 256 * 2**20
DTYPE_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2,
               "bfloat16": 2, "int16": 2, "uint8": 1, "int8": 1, "bool": 1}  # fmt: skip


def tensors_bytes(tensors: list[dict[str, Any]]) -> int:
    """The bytes of tensors as a reference described them (shape and dtype)."""
    return sum(math.prod(t["shape"]) * DTYPE_BYTES.get(t.get("dtype", ""), 8)
               for t in tensors if "shape" in t)  # fmt: skip


def with_timing_case(kept: KeptCases) -> KeptCases:
    """An operator whose cases name none to time (NPUKernelBench's rows do not) times the
    largest of the cases every target holds whose inputs and outputs take at most
    TIMING_CASE_BYTES (the smallest where each takes more): without one no kernel of it could
    be timed, and a row of gigabytes would make every evaluation take minutes. The operator's
    description says which case and why."""
    spec = kept.definition.spec
    if any(case.timing for case in spec.cases):
        return kept
    sizes = [tensors_bytes(o.get("inputs", []) + o["outputs"]) for o in kept.outcomes]
    refused = [len(case_unsupported_targets(c.dtype, o))
               for c, o in zip(spec.cases, kept.outcomes, strict=True)]  # fmt: skip
    fits = [i for i, size in enumerate(sizes) if size <= TIMING_CASE_BYTES]
    chosen = (max(fits, key=lambda i: (-refused[i], sizes[i])) if fits
              else min(range(len(sizes)), key=lambda i: (refused[i], sizes[i])))  # fmt: skip
    cases = [replace(c, timing=i == chosen) for i, c in enumerate(spec.cases)]
    why = "the largest within" if fits else "the smallest: every case is over"
    line = (f"Timed on case {cases[chosen].case_id} ({sizes[chosen] / 2**20:.1f} MiB of inputs "
            f"and outputs, {why} {TIMING_CASE_BYTES // 2**20} MiB).")  # fmt: skip
    description = "\n".join([spec.description, "", line]).strip()
    definition = replace(kept.definition, spec=replace(spec, cases=cases, description=description))
    return replace(kept, definition=definition)


def kept_cases(definition: OperatorDefinition) -> KeptCases:
    """Run the reference on every case and keep those it ran: a case it failed on is left out,
    saying why, unless it is a timing case or no case is left (CasesFailed)."""
    answer = reference_answer(definition)
    if "error" in answer:
        raise ImportProblem(answer["error"])
    answers = {case["case_id"]: case for case in answer["cases"]}
    kept: list[CaseSpec] = []
    outcomes: list[dict[str, Any]] = []
    reasons, timing = [], []
    for case in definition.spec.cases:
        outcome = answers.get(case.case_id)
        if outcome is None:
            reason = "not run: a case before it ran out of memory"
        elif not (reason := case_failure(outcome) or kind_mismatch(outcome, outcomes, kept)):
            kept.append(case)
            outcomes.append(outcome)
            continue
        reasons.append(f"case {case.case_id}: {reason}")
        if case.timing:
            timing.append(reasons[-1])
    if timing or not kept:
        raise CasesFailed(reasons, timing=timing)
    spec = replace(definition.spec, cases=kept)
    return KeptCases(replace(definition, spec=spec), outcomes,
                     [f"left out {reason}" for reason in reasons])  # fmt: skip


def kind_mismatch(
    outcome: dict[str, Any], outcomes: list[dict[str, Any]], kept: list[CaseSpec]
) -> str:
    """Why a case cannot join the first one kept: an operator's inputs are tensors or
    attributes, the same in every case, so one where a tensor stands for another's number (a
    fill value given as a tensor in one row, a number in the next) is left out."""
    if not outcomes:
        return ""
    for key in ("inputs", "outputs"):
        for position, (mine, first) in enumerate(zip(outcome[key], outcomes[0][key],
                                                     strict=False)):  # fmt: skip
            if ("scalar" in mine) != ("scalar" in first):
                what = "a number" if "scalar" in mine else "a tensor"
                other = "a tensor" if "scalar" in mine else "a number"
                return (f"its {key[:-1]} {position} is {what}, where case {kept[0].case_id}'s "
                        f"is {other}")  # fmt: skip
    return ""


def with_described_tensors(
    definition: OperatorDefinition, outcomes: list[dict[str, Any]]
) -> OperatorDefinition:
    """Imported operators declare no tensors: name them from what the reference produced.

    A case that states no dtype takes the dtype of the reference's first output.
    """
    spec = definition.spec
    cases = [
        case if case.dtype else replace(case, dtype=_first_dtype(outcome))
        for case, outcome in zip(spec.cases, outcomes, strict=True)
    ]
    spec = replace(spec, cases=cases)
    if spec.outputs:
        check_declared_outputs(spec, outcomes)
        return replace(definition, spec=spec)
    inputs, attributes = _described_inputs(outcomes)
    attributes = [*setting_attributes(spec), *attributes]  # settings first, as traced
    outputs = [
        _described(f"y{i}", t, outcomes, "outputs") for i, t in enumerate(outcomes[0]["outputs"])
    ]
    described = replace(spec, inputs=inputs, outputs=outputs, attributes=attributes)
    return replace(definition, spec=described)


SETTING_PREFIX = "kope_setting"  # reference_loading.SETTING_PREFIX


def with_setting_attributes(
    definition: OperatorDefinition, outcomes: list[dict[str, Any]]
) -> OperatorDefinition:
    """An imported operator whose model is built with settings that differ from case to case
    (an NPUKernelBench row's `reduction`, `n`, `incx`, given to get_init_inputs) gets each such
    setting as an attribute, first in the kernel's attrs, as the suite's own kernels are
    given them: numbers as they are, text as its index among the texts the cases use (the
    description lists them). A setting the same in every case is no attribute: the model, and
    so the reference and the lowering, has it fixed. Settings given as anything but numbers
    or text (lists, tensors) are left to the shapes they make."""
    cases, spec = definition.spec.cases, definition.spec
    found = [outcome.get("settings") for outcome in outcomes]
    if not cases or any(not isinstance(s, list) for s in found):
        return definition
    per_case: list[list[dict[str, Any]]] = found  # type: ignore[assignment]
    attributes, values, lines = [], [dict[str, Any]() for _ in cases], []
    for position in range(min(len(s) for s in per_case)):
        encoded = encoded_setting([s[position] for s in per_case])
        if encoded is None:
            continue
        numbers, texts = encoded
        name = f"{SETTING_PREFIX}{position}"
        whole = all(float(n).is_integer() for n in numbers)
        attributes.append(AttributeSpec(name, "int" if whole else "float",
                                        int(numbers[0]) if whole else numbers[0]))  # fmt: skip
        for value, number in zip(values, numbers, strict=True):
            value[name] = int(number) if whole else number
        lines.append(setting_line(name, position, texts))
    if not attributes:
        return definition
    cases = [replace(c, params={**c.params, **v}) for c, v in zip(cases, values, strict=True)]
    description = "\n".join([spec.description, "", *lines]).strip()
    spec = replace(spec, cases=cases, attributes=[*attributes, *spec.attributes],
                   description=description)  # fmt: skip
    return replace(definition, spec=spec)


def encoded_setting(values: list[dict[str, Any]]) -> tuple[list[float], list[str]] | None:
    """One setting across the cases as numbers (and the texts, in index order, where it is
    text); None where it is the same in every case or is not a number or text in all."""
    kinds = {next(iter(v), "") for v in values}
    if len(kinds) != 1 or kinds - {"number", "text"}:
        return None
    raw = [v[next(iter(kinds))] for v in values]
    if len({repr(r) for r in raw}) == 1:
        return None
    if kinds == {"number"}:
        return [float(r) for r in raw], []
    texts = sorted(set(raw))
    return [float(texts.index(r)) for r in raw], texts


def setting_line(name: str, position: int, texts: list[str]) -> str:
    meaning = ", ".join(f"{i} = {t!r}" for i, t in enumerate(texts))
    what = f"the model's setting {position} (get_init_inputs' value {position})"
    return f"Attribute {name}: {what}" + (f": {meaning}." if meaning else ".")


def setting_attributes(spec: OperatorSpec) -> list[AttributeSpec]:
    return [a for a in spec.attributes if a.name.startswith(SETTING_PREFIX)]


def _first_dtype(outcome: dict[str, Any]) -> str:
    tensors = [t for t in outcome["outputs"] + outcome["inputs"] if "dtype" in t]
    return str(tensors[0]["dtype"]) if tensors else "float32"


def _described(
    name: str, tensor: dict[str, Any], outcomes: list[dict[str, Any]], key: str
) -> TensorSpec:
    position = int(name[1:])
    seen = [o[key][position] for o in outcomes if len(o[key]) > position]
    shape: list[int | str] = list(tensor["shape"])
    if any(t["shape"] != tensor["shape"] for t in seen):
        shape = [PER_CASE] * len(shape)
    same_dtype = all(t["dtype"] == tensor["dtype"] for t in seen)
    return TensorSpec(name=name, dtype=tensor["dtype"] if same_dtype else CASE_DTYPE, shape=shape)


def _described_inputs(
    outcomes: list[dict[str, Any]],
) -> tuple[list[TensorSpec], list[AttributeSpec]]:
    """Tensor inputs become tensors x0, x1, …; scalar inputs become attributes a0, a1, …"""
    tensors, attributes = [], []
    for position, value in enumerate(outcomes[0]["inputs"]):
        if "scalar" in value:
            attributes.append(AttributeSpec(f"a{position}", _attribute_type(value), value["value"]))
        else:
            tensors.append(_described(f"x{position}", value, outcomes, "inputs"))
    return tensors, attributes


def _attribute_type(value: dict[str, Any]) -> str:
    return {"bool": "bool", "int": "int"}.get(value["scalar"], "float")


def check_declared_outputs(spec: OperatorSpec, outcomes: list[dict[str, Any]]) -> None:
    for case, outcome in zip(spec.cases, outcomes, strict=True):
        produced = outcome["outputs"]
        if len(produced) != len(spec.outputs):
            raise ImportProblem(
                f"case {case.case_id}: the reference returned {len(produced)} outputs, "
                f"the spec declares {len(spec.outputs)}"
            )
        for declared, actual in zip(spec.outputs, produced, strict=True):
            expected = {"shape": declared.resolved_shape(case.params),
                        "dtype": declared.resolved_dtype(case.dtype)}  # fmt: skip
            if not declared_matches(expected, actual):
                raise ImportProblem(
                    f"case {case.case_id}: output {declared.name} is {actual}, "
                    f"the spec declares {expected}"
                )


def declared_matches(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    shape, produced = expected["shape"], actual["shape"]
    same_shape = len(shape) == len(produced) and all(
        d in (PER_CASE, p) for d, p in zip(shape, produced, strict=True)
    )
    return same_shape and expected["dtype"] == actual["dtype"]


def existing_version(team: Team | None, definition: OperatorDefinition) -> OperatorVersion | None:
    return OperatorVersion.objects.filter(
        operator__team=team,
        operator__slug=definition.spec.slug,
        content_hash=definition.content_hash(),
    ).first()


@transaction.atomic
def version_store(
    *,
    team: Team | None,
    definition: OperatorDefinition,
    outcomes: list[dict[str, Any]],
    created_by: User | None,
    content_hash: str = "",
) -> tuple[OperatorVersion, bool]:
    """`content_hash`: the definition's as found, when cases were left out of it since (an
    import that finds it again then knows it unchanged without running the reference)."""
    content_hash = content_hash or definition.content_hash()
    definition = with_described_tensors(definition, outcomes)
    spec = definition.spec
    operator, _ = Operator.objects.select_for_update().get_or_create(
        team=team, slug=spec.slug, defaults={"family": spec.family}
    )
    if found := operator.versions.filter(content_hash=content_hash).first():
        return found, False
    number = (operator.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    version = OperatorVersion.objects.create(
        operator=operator, number=number, name=spec.name, level=spec.level,
        description=spec.description, spec=spec.as_json(),
        reference_kind=definition.reference_kind, reference_source=definition.reference_source,
        content_hash=content_hash, origin=definition.origin, origin_path=definition.origin_path,
        scale=definition.scale, created_by=created_by,
    )  # fmt: skip
    OperatorCase.objects.bulk_create(_cases(version, spec, outcomes))
    StartingKernel.objects.bulk_create(
        StartingKernel(version=version, target=t, source=s)
        for t, s in definition.starting_kernels.items()
    )
    if operator.family != spec.family:
        operator.family = spec.family
        operator.save(update_fields=["family"])
    return version, True


def _cases(
    version: OperatorVersion, spec: OperatorSpec, outcomes: list[dict[str, Any]]
) -> list[OperatorCase]:
    return [
        OperatorCase(
            version=version, position=position, case_id=case.case_id, params=case.params,
            dtype=case.dtype, timing=case.timing, inputs=outcome["inputs"],
            outputs=outcome["outputs"],
            unsupported_targets=case_unsupported_targets(case.dtype, outcome),
        )
        for position, (case, outcome) in enumerate(zip(spec.cases, outcomes, strict=True))
    ]  # fmt: skip


def case_unsupported_targets(case_dtype: str, outcome: dict[str, Any]) -> list[str]:
    """The targets that cannot represent a case's dtypes (its inputs' and outputs'; an
    imported case's own dtype is "", what its reference produces)."""
    tensors = outcome.get("inputs", []) + outcome["outputs"]
    dtypes = {case_dtype, *(t["dtype"] for t in tensors if "dtype" in t)} - {""}
    return unsupported_targets(dtypes)


@transaction.atomic
def suite_set(
    *,
    team: Team | None,
    slug: str,
    name: str,
    operators: list[Operator],
    description: str = "",
    source: str = "",
) -> Suite:
    """Create or replace a suite's ordered list of operators (`source`: the folder an import
    made it from)."""
    suite, _ = Suite.objects.update_or_create(
        team=team, slug=slug, defaults={"name": name, "description": description, "source": source}
    )
    suite.entries.all().delete()
    SuiteEntry.objects.bulk_create(
        SuiteEntry(suite=suite, position=i, operator=op) for i, op in enumerate(operators)
    )
    return suite


def builtin_suite_load(
    *, on_operator: Callable[[OperatorVersion, bool], None] | None = None
) -> Suite:
    """Store every built-in operator (a new version where its folder changed) and the suite,
    all or none: one operator that fails leaves the shared operators matching the suite.

    The references of all new or changed operators run in one sandboxed child, so PyTorch
    starts once rather than once per operator (before the transaction: it holds no lock
    while they run). `on_operator` hears of each as it is stored, before the commit.
    """
    definitions = [builtin_definition(folder) for folder in read_builtin_suite()]
    pending = [d for d in definitions if existing_version(None, d) is None]
    answers = run_reference_batch([d.runner_request() for d in pending]) if pending else []
    outcomes = {d.spec.slug: answer for d, answer in zip(pending, answers, strict=True)}
    operators = []
    with transaction.atomic():
        for definition in definitions:
            version, created = _builtin_store(definition, outcomes.get(definition.spec.slug))
            operators.append(version.operator)
            if on_operator:
                on_operator(version, created)
        return suite_set(
            team=None, slug=BUILTIN_SUITE_SLUG, name="Built-in CPU suite", operators=operators,
            description="The operators shipped with KOPE Workbench, easy first, for the cpu-c "
            "target.",
        )  # fmt: skip


def _builtin_store(
    definition: OperatorDefinition, answer: dict[str, Any] | None
) -> tuple[OperatorVersion, bool]:
    if answer is None:
        found = existing_version(None, definition)
        assert found is not None
        return found, False
    slug = definition.spec.slug
    try:
        outcomes = case_outcomes(answer)
    except ImportProblem as error:
        raise ImportProblem(f"built-in operator {slug}: {error.message}") from None
    return version_store(team=None, definition=definition, outcomes=outcomes, created_by=None)


def builtin_suite_loaded() -> bool:
    return Suite.objects.filter(team=None, slug=BUILTIN_SUITE_SLUG).exists()


def definition_of(version: OperatorVersion) -> OperatorDefinition:
    return OperatorDefinition(
        spec=spec_from_json(version.spec),
        reference_kind=version.reference_kind,
        reference_source=version.reference_source,
        origin=version.origin,
        origin_path=version.origin_path,
        scale=version.scale,
        starting_kernels={k.target: k.source for k in version.starting_kernels.all()},
    )


MAX_STARTING_KERNEL_CHARS = 200_000  # as a session's uploaded starting kernel


def _check_edit_texts(texts: dict[str, str | None], kernels: Mapping[str, str | None]) -> None:
    """Name, description and starting kernels (keyed by target) as PostgreSQL stores them."""
    for target, source in kernels.items():
        if target not in TARGET_DTYPES:
            raise DomainError(f"no target {target[:40]!r} (targets: {', '.join(TARGET_DTYPES)})")
        if source is not None and not source.strip():  # as a session's upload (runs.api)
            raise DomainError(f"the {target} starting kernel is empty; null removes a target's "
                              "starting kernel")  # fmt: skip
    for key, text in {**texts, **kernels}.items():
        if text is None:
            continue
        if "\x00" in text or not text.encode(errors="ignore").decode() == text:
            raise DomainError(f"the {key} holds a NUL character or is not valid Unicode text")
        if key in TARGET_DTYPES and len(text) > MAX_STARTING_KERNEL_CHARS:
            raise DomainError(f"the {key} starting kernel is {len(text)} characters; the limit "
                              f"is {MAX_STARTING_KERNEL_CHARS}")  # fmt: skip


def version_edit(
    *,
    version: OperatorVersion,
    user: User | None,
    name: str | None = None,
    description: str | None = None,
    max_abs: float | None = None,
    max_rel: float | None = None,
    starting_kernels: Mapping[str, str | None] | None = None,
    based_on: int | None = None,
) -> tuple[OperatorVersion, bool]:
    """A new version with the changes; the cases and their recorded outcomes carry over.

    `starting_kernels` changes the targets it names (None removes one's kernel); the other
    targets keep theirs.

    `based_on` is the version number the editor saw: when another version was saved since,
    the edit is refused (Conflict) rather than silently undoing that version's changes.
    Returns the version unchanged (and False) when the edit changes nothing.
    """
    require_newest(version, based_on)
    _check_edit_texts({"name": name, "description": description}, starting_kernels or {})
    if name is not None and not name.strip():
        raise DomainError("the name cannot be empty")
    definition = definition_of(version)
    spec = replace(
        definition.spec,
        name=definition.spec.name if name is None else name.strip(),
        description=definition.spec.description if description is None else description.strip(),
        max_abs=definition.spec.max_abs if max_abs is None else max_abs,
        max_rel=definition.spec.max_rel if max_rel is None else max_rel,
    )
    try:
        validate(spec, where=str(version))
    except SpecError as error:
        raise DomainError(str(error)) from None
    merged = {**definition.starting_kernels, **(starting_kernels or {})}
    kernels = {target: source for target, source in merged.items() if source is not None}
    edited = replace(
        definition, spec=spec, origin=OperatorVersion.Origin.EDITED, starting_kernels=kernels
    )
    if edited.content_hash() == version.content_hash:
        return version, False
    outcomes = [{"inputs": c.inputs, "outputs": c.outputs} for c in version.cases.all()]
    with transaction.atomic():
        # Checked again under the operator's lock, which version_store takes too: of two edits
        # made at once, the second would otherwise silently drop the first's changes.
        Operator.objects.select_for_update().filter(pk=version.operator_id).first()
        if same := existing_version(version.operator.team, edited):
            return same, False  # the same edit, made at the same moment by someone else
        require_newest(version, based_on)
        return version_store(team=version.operator.team, definition=edited, outcomes=outcomes,
                             created_by=user)  # fmt: skip


def require_newest(version: OperatorVersion, based_on: int | None = None) -> None:
    latest = version.operator.versions.order_by("-number").first()
    if latest is not None and latest.pk != version.pk:
        raise Conflict(f"{version} is not the newest version ({latest}); edit that one")
    if based_on is not None and based_on > version.number:  # no editor saw it: made up
        raise DomainError(f"{version.operator.slug} has no version {based_on} (the newest is "
                          f"version {version.number}); nothing was saved")  # fmt: skip
    if based_on is not None and based_on != version.number:
        raise Conflict(
            f"the edit was made to version {based_on} of {version.operator.slug}, but the newest "
            f"is version {version.number}: look at its changes and edit that one; nothing was saved"
        )
