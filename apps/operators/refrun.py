"""The reference runner: a child process that executes operator reference code.

Reference code is code from outside (imported benchmarks), so it runs only here, never in the
web or worker process: `python -m apps.operators.refrun` reads one JSON request on stdin and
writes one JSON answer on stdout. It imports nothing of Django. Loading the reference (its
three layouts) is apps/operators/reference_loading.py.

`python -m apps.operators.refrun --warm` is the same runner kept warm (apps/operators/
warmrunner.py): PyTorch is imported once, and each order on stdin (a request, its limits and
its files) is served by a child forked for it, in a session of its own, under the limits; the
runner answers each order with one line, how the child ended.

Request: {"kind": "kope"|"kernelbench"|"npukernelbench", "source": {...}, "cases": [...],
          "seed": int, "kernel_so": path|null, "attributes": [[float]], "max_abs", "max_rel"}
Answer:  {"cases": [{"case_id", "outputs": [{"shape", "dtype"}], "error", "check": {...},
                     "settings": [...] where the Model is built with a case's settings}]}
With "mode": "lower", the answer is the Model lowered to a naive C kernel for the cases
(apps/operators/lowering; a case's "attributes", the kernel's first attributes, tell its
trace apart): {"source": str, "left_out": [str]} or {"error": str}.
A request {"batch": [request, ...]} is answered {"batch": [answer, ...]}.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import math
import os
import select
import signal
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import numpy
import torch

from apps.operators.reference_loading import LOADERS, Reference, as_list, case_key
from apps.sandbox import policies, seccomp
from apps.sandbox.jail import Limits, sandbox_ids
from apps.sandbox.policies import Step

KOPE_DTYPES = {torch.float32: 0, torch.float64: 1, torch.int32: 2, torch.int64: 3,
               torch.uint8: 4, torch.bool: 5}  # fmt: skip


# --- comparing a compiled kernel against the reference --------------------------------------


class KopeTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64))]  # fmt: skip


def as_kope_tensors(tensors: list[torch.Tensor]) -> tuple[Any, list[Any]]:
    array = (KopeTensor * len(tensors))()
    keep = []  # the shape/stride arrays must outlive the call
    for slot, tensor in zip(array, tensors, strict=True):
        shape = (ctypes.c_int64 * tensor.dim())(*tensor.shape)
        strides = (ctypes.c_int64 * tensor.dim())(*tensor.stride())
        keep += [shape, strides]
        slot.data, slot.dtype, slot.ndim = (
            tensor.data_ptr(),
            KOPE_DTYPES[tensor.dtype],
            tensor.dim(),
        )
        slot.shape, slot.strides = shape, strides
    return array, keep


def run_kernel(
    kernel: Any, inputs: list[torch.Tensor], expected: list[torch.Tensor], attributes: list[float]
) -> list[torch.Tensor]:
    inputs = [t.contiguous() for t in inputs]
    # Contiguous, as the ABI promises, even where the reference returned a view (a transpose).
    outputs = [torch.full(e.shape, float("nan"), dtype=e.dtype) if e.is_floating_point()
               else torch.zeros(e.shape, dtype=e.dtype) for e in expected]  # fmt: skip
    # The shape and stride arrays (second items) must stay alive until the call returns.
    in_array, _in_arrays = as_kope_tensors(inputs)
    out_array, _out_arrays = as_kope_tensors(outputs)
    attrs = (ctypes.c_double * max(1, len(attributes)))(*attributes)
    status = kernel(in_array, len(inputs), out_array, len(outputs), attrs, len(attributes))
    if status != 0:
        raise RuntimeError(f"kope_kernel returned {status}")
    return outputs


def errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    diff = (actual.double() - expected.double()).abs()
    rel = diff / expected.double().abs().clamp_min(1e-12)
    return float(diff.max()) if diff.numel() else 0.0, float(rel.max()) if rel.numel() else 0.0


def within_tolerance(
    actual: torch.Tensor, expected: torch.Tensor, max_abs: float, max_rel: float
) -> bool:
    # An element passes when its error is within max_abs + max_rel * |expected| (allclose).
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if not actual.is_floating_point():
        return bool(torch.equal(actual, expected))
    return bool(torch.allclose(actual, expected, rtol=max_rel, atol=max_abs))


# --- the request loop ----------------------------------------------------------------------

SCALARS = (bool, int, float)


def describe(value: Any, *, scalar_ok: bool = False) -> dict[str, Any]:
    """Shape and dtype of a tensor; a scalar input (NPUKernelBench has some): type and value."""
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if scalar_ok and isinstance(value, SCALARS):
        return {"scalar": type(value).__name__, "value": value}
    raise TypeError(f"the reference gave {type(value).__name__}, not a tensor")


def tensors(values: list[Any]) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def scalar_attributes(values: list[Any]) -> list[float]:
    """Scalar inputs reach the kernel as attributes, after the declared ones, in input order."""
    return [float(v) for v in values if isinstance(v, SCALARS)]


def run_case(
    reference: Reference,
    case: dict[str, Any],
    request: dict[str, Any],
    kernel: Any,
    attributes: list[float],
) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(int(request.get("seed", 0)))
    inputs = reference.make_inputs(case["params"], generator)
    snapshot = [t.clone() for t in tensors(inputs)]
    given = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
    expected = as_list(reference.compute(given, case["params"]))
    result: dict[str, Any] = {
        "case_id": case["case_id"],
        "inputs": [describe(v, scalar_ok=True) for v in inputs],
        "outputs": [describe(t) for t in expected],
    }
    if reference.settings is not None:
        result["settings"] = [described_setting(v) for v in reference.settings(case["params"])]
    if kernel is not None:
        all_attributes = attributes + scalar_attributes(inputs)
        actual = run_kernel(kernel, tensors(inputs), expected, all_attributes)
        result["check"] = compare(actual, expected, tensors(inputs), snapshot, request, reference,
                                  case)  # fmt: skip
    return result


def described_setting(value: Any) -> dict[str, Any]:
    """One of the values a case's model is built with, as the importer can pass it to a
    kernel: {"number": n} (bools too), {"text": s}, or {"other": type name}."""
    if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
        return {"number": float(value)}
    if isinstance(value, str):
        return {"text": value}
    return {"other": type(value).__name__}


def compare(
    actual: list[Any],
    expected: list[Any],
    inputs: list[Any],
    snapshot: list[Any],
    request: dict[str, Any],
    reference: Reference,
    case: dict[str, Any],
) -> dict[str, Any]:
    pairs = list(zip(actual, expected, strict=True))
    measured = [errors(a, e) for a, e in pairs]
    if reference.check is not None:
        passed = bool(reference.check(case["params"], expected, actual))
    else:
        passed = all(
            within_tolerance(a, e, request["max_abs"], request["max_rel"]) for a, e in pairs
        )
    inputs_intact = all(torch.equal(a, b) for a, b in zip(inputs, snapshot, strict=True))
    return {
        "passed": passed and inputs_intact,
        "inputs_intact": inputs_intact,
        "max_abs": max(m[0] for m in measured),
        "max_rel": max(m[1] for m in measured),
    }


def load_kernel(path: str | None) -> Any:
    if not path:
        return None
    kernel = ctypes.CDLL(path).kope_kernel
    kernel.restype = ctypes.c_int
    return kernel


def lowered(reference: Reference, cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The reference's model lowered to a naive C kernel for every kind of call the cases
    make: {"source": ..., "left_out": [why, ...]}, or {"error": ...} naming what stopped it."""
    from apps.operators.lowering import LoweringError, lower_variants

    if reference.model is None:
        return {"error": "the reference is no Model to lower (a KOPE reference function)"}
    build = reference.model
    examples = ((functools.partial(build, case["params"]), inputs, case.get("attributes", []),
                 case.get("outputs"))
                for case, inputs in examples_to_trace(reference, cases))  # fmt: skip
    try:
        source, left_out = lower_variants(examples)
    except LoweringError as error:
        return {"error": str(error)}
    return {"source": source, "left_out": left_out}


Example = tuple[dict[str, Any], list[Any]]  # a case and the inputs made for it


def examples_to_trace(reference: Reference, cases: list[dict[str, Any]]) -> Iterator[Example]:
    """Every case with its inputs, the first case of each kind of call first: one trace covers
    every size of its ranks, but not another rank or dtype, a size of 1 (torch.export fixes
    those) or another scalar value, so those come first; a later case is traced only when
    no trace takes it (a size the model fixes, such as LayerNorm's normalized_shape, built
    from the case's settings). The inputs are made again for the later cases rather than
    all kept at once. (A setting the model is built with that changes no size, such as an
    NPUKernelBench row's `n`, is no part of the call: a kernel cannot tell two cases apart
    by it.)"""
    first: set[str] = set()
    for case in cases:
        inputs = example_inputs(reference, case)
        if call_kind(inputs) not in first:
            first.add(call_kind(inputs))
            yield case, inputs
    for case in cases:
        inputs = example_inputs(reference, case)
        if call_kind(inputs) in first:
            first.discard(call_kind(inputs))  # this kind's first case: yielded above
            continue
        yield case, inputs


def example_inputs(reference: Reference, case: dict[str, Any]) -> list[Any]:
    return list(reference.make_inputs(case["params"], torch.Generator().manual_seed(0)))


def call_kind(inputs: list[Any]) -> str:
    return case_key([(str(v.dtype), [d == 1 for d in v.shape]) if isinstance(v, torch.Tensor)
                     else v for v in inputs])  # fmt: skip


def serve(request: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(int(request.get("threads", 1)))
    reference = LOADERS[request["kind"]](request["source"])
    mode = request.get("mode", "outcomes")
    if mode == "generate":
        return {"runs": [generate_safely(reference, run, request) for run in request["runs"]]}
    if mode == "check":
        return {"checks": [custom_check(reference, item) for item in request["checks"]]}
    if mode == "lower":
        return lowered(reference, request["cases"])
    kernel = load_kernel(request.get("kernel_so"))
    answers = []
    for index, case in enumerate(request["cases"]):
        attributes = request.get("attributes", [[]] * len(request["cases"]))[index]
        try:
            answers.append(run_case(reference, case, request, kernel, attributes))
        except Exception as error:
            answers.append({"case_id": case["case_id"], "error": _error_text(error)})
            if _out_of_memory(error):
                break  # the next case would only fail the same way, slowly
    return {"cases": answers}


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or "DefaultCPUAllocator: can't allocate" in str(error)


def _error_text(error: BaseException) -> str:
    if _out_of_memory(error):
        return "the reference ran out of memory (KOPE_REFERENCE_MEMORY_MB limits it)"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<")]
    if not frames:
        return f"{type(error).__name__}: {error}"
    source = SOURCE_FILES.get(frames[-1].filename.strip("<>"), frames[-1].filename)
    return f"{type(error).__name__}: {error} ({source} line {frames[-1].lineno})"


# The names exec_module gives each layout's files, and the files they are on disk.
SOURCE_FILES = {
    "reference": "reference.py",
    "problem": "the problem file",
    "module": "validation/module.py",
    "prepare_inputs": "validation/prepare_inputs.py",
}


# --- generating evaluation data: inputs for the candidate, expected outputs for the judge ----


def generate_safely(
    reference: Reference, run: dict[str, Any], request: dict[str, Any]
) -> dict[str, Any]:
    try:
        return generate(reference, run, request)
    except Exception as error:  # a reference may raise anything
        return {"run_id": run["run_id"], "error": _error_text(error)}


def generate(reference: Reference, run: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """Make one run's inputs from its seed, compute the expected outputs, write both as raw files.

    Inputs go to `input_dir` (the candidate gets them), expected outputs to `expected_dir`
    (only the judge reads them). The seed never leaves the trusted side.
    """
    generator = torch.Generator().manual_seed(int(run["seed"]))
    inputs = reference.make_inputs(run["params"], generator)
    given = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
    expected = as_list(reference.compute(given, run["params"]))
    stem = run["run_id"]
    written_inputs = [write_tensor(t, Path(request["input_dir"]) / f"{stem}.in{i}")
                      for i, t in enumerate(tensors(inputs))]  # fmt: skip
    written_outputs = [write_tensor(t, Path(request["expected_dir"]) / f"{stem}.out{i}")
                       for i, t in enumerate(expected)]  # fmt: skip
    # Index inputs may legitimately repeat one value; data inputs must not be constant.
    constant = [f"input {i}" for i, t in enumerate(tensors(inputs))
                if t.is_floating_point() and is_constant(t)]  # fmt: skip
    return {"run_id": stem, "inputs": written_inputs, "outputs": written_outputs,
            "scalars": scalar_attributes(inputs), "constant_inputs": constant}  # fmt: skip


def write_tensor(tensor: Any, path: Path) -> dict[str, Any]:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"the reference gave {type(tensor).__name__}, not a tensor")
    data = tensor.detach().contiguous().numpy()
    data.tofile(path)
    return {"file": path.name, "dtype": str(data.dtype), "shape": list(data.shape),
            "sha256": hashlib.sha256(data.tobytes()).hexdigest()}  # fmt: skip


def is_constant(tensor: torch.Tensor) -> bool:
    flat = tensor.reshape(-1)
    return flat.numel() > 1 and bool((flat == flat[0]).all())


def custom_check(reference: Reference, item: dict[str, Any]) -> dict[str, Any]:
    """The operator's own correctness rule (NPUKernelBench's custom_check_precision)."""
    try:
        expected = [read_tensor(Path(item["dir"]) / f["file"], f) for f in item["expected"]]
        actual = [read_tensor(Path(item["dir"]) / f["file"], f) for f in item["actual"]]
        assert reference.check is not None
        return {
            "run_id": item["run_id"],
            "passed": bool(reference.check(item["params"], expected, actual)),
        }
    except Exception as error:  # a checker may raise anything
        return {"run_id": item["run_id"], "passed": False, "error": _error_text(error)}


def read_tensor(path: Path, meta: dict[str, Any]) -> torch.Tensor:
    array = numpy.fromfile(path, dtype=meta["dtype"]).reshape(meta["shape"])
    return torch.from_numpy(array)


def serve_safely(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return serve(request)
    except Exception as error:  # a reference may raise anything
        return {"error": _error_text(error)}


def answer_to(request: dict[str, Any]) -> dict[str, Any]:
    if "batch" in request:  # several operators in one process: torch is imported once
        return {"batch": [serve_safely(r) for r in request["batch"]]}
    return serve_safely(request)


def main() -> None:
    if sys.argv[1:] == ["--warm"]:
        serve_orders()
        return
    request = json.load(sys.stdin)
    forbid_what_a_reference_never_needs()
    # Whatever the reference or a kernel prints (Python or C) goes to stderr: stdout carries
    # only the answer.
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    answer = answer_to(request)
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)


def forbid_what_a_reference_never_needs() -> None:
    """The reference step's own filter, once Python and PyTorch are loaded: no program."""
    own_filter = policies.POLICIES[Step.REFERENCE].own_filter
    assert own_filter is not None
    seccomp.install(own_filter)


# --- kept warm: a forked child per order ---------------------------------------------------


def serve_orders() -> None:
    """Until stdin closes: one order per line, one line back per order."""
    # Ctrl-C is meant for the process that started this one; it ends when that one closes
    # stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sandbox_ids()  # looked up once, before any fork: the children cannot read /etc then
    for line in sys.stdin:
        sys.stdout.write(json.dumps(serve_forked(json.loads(line))) + "\n")
        sys.stdout.flush()


def serve_forked(order: dict[str, Any]) -> dict[str, Any]:
    """The order's request served in a child; its exit code (negative: the signal that ended
    it), and whether it ran past the order's time and was killed."""
    runner = os.getpid()
    pid = os.fork()
    if pid == 0:
        serve_in_child(order, runner)
    timed_out = not exited_within(pid, float(order["timeout_s"]))
    if timed_out:
        kill_group(pid)
    _, status = os.waitpid(pid, 0)
    return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}


def exited_within(pid: int, timeout_s: float) -> bool:
    pidfd = os.pidfd_open(pid)
    try:
        return bool(select.select([pidfd], [], [], timeout_s)[0])
    finally:
        os.close(pidfd)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # killed before it made its own group
        os.kill(pid, signal.SIGKILL)


def serve_in_child(order: dict[str, Any], runner: int) -> NoReturn:
    """As a fresh runner would: its own session, its output in the order's stderr file, then
    confined by the reference step's policy (ended with the runner, its work dir as its
    current folder), the answer in the order's answer file there."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        workdir = Path(order["workdir"])
        output_to(str(workdir / order["stderr_file"]))
        policies.confine_forked(Step.REFERENCE, workdir, Limits(**order["limits"]), parent=runner)
        os.environ["OMP_NUM_THREADS"] = str(int(order["request"].get("threads", 1)))
        os.environ["TMPDIR"] = str(workdir)
        answer = answer_to(order["request"])
        Path(order["answer_file"]).write_text(json.dumps(answer))
        code = 0
    except BaseException:  # whatever ended it, the parent reads why from the stderr file
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def output_to(path: str) -> None:
    """Standard output and error into `path` (what a reference prints is no answer), standard
    input from nothing: the runner's own pipes stay out of the child's reach."""
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(nothing, 0)
    os.close(log)
    os.close(nothing)
    sys.stdout = sys.stderr


if __name__ == "__main__":
    main()
