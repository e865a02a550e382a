"""The candidate process of the GPU targets: calls an untrusted kernel on prepared inputs.

`python -m apps.devices.gpu.harness MANIFEST` runs confined like the cpu-c harness (own
session, network namespace, unprivileged uid, limits, cleared environment) and never sees
expected outputs or seeds. A `triton` candidate is a Python module defining
`kope_kernel(inputs, outputs, attrs)`; a `cuda` candidate is a shared object defining the C
`kope_kernel` of kope_kernel.h, called with device pointers.

On the CPU (Triton's interpreter) the seccomp filter goes on before the candidate module is
imported. On a CUDA device, Triton compiles each kernel on its first call (ptxas runs as a
subprocess and the cache is written), so the module is imported and called once per run on
copies of the inputs first, and the filter goes on before any call that counts.

Progress goes to stdout as `start RUN` / `done RUN STATUS`; the last line is `result {json}`.
STATUS 0 is a clean call, 1 an exception, 2 a broken runtime rule (the result says which).
Imports no Django.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from apps.sandbox import seccomp
from apps.sandbox.policies import GPU_HARNESS_CALLS

Kernel = Callable[[list[Any], list[Any], list[float]], Any]

# What a launcher may ask of PyTorch itself: shapes, strides, pointers and allocation.
# Anything else called from the candidate's file (torch.matmul, x * 2, F.relu, .copy_)
# is PyTorch doing the work.
ALLOWED_TORCH = frozenset({
    "__get__", "numel", "size", "stride", "dim", "is_contiguous", "element_size", "data_ptr",
    "storage_offset", "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "view",
    "__len__", "__index__", "__int__", "__format__", "__repr__", "__hash__", "__eq__",
})  # fmt: skip
NUMPY_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                "bool"}  # fmt: skip


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --- tensors: files in, files out -----------------------------------------------------------


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def read_tensor(meta: dict[str, Any], device: str) -> Any:
    import torch

    shape = tuple(meta["shape"])
    if meta["dtype"] == "bfloat16":  # numpy has no bfloat16: read the raw 16-bit words
        raw = np.fromfile(meta["file"], dtype=np.int16).reshape(shape)
        return torch.from_numpy(raw).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.fromfile(meta["file"], dtype=meta["dtype"]).reshape(shape)).to(
        device
    )


def write_tensor(tensor: Any, target: np.ndarray) -> None:
    import torch

    host = tensor.detach().to("cpu")
    if host.dtype == torch.bfloat16:
        host = host.view(torch.int16)
    target[...] = host.numpy()
    if isinstance(target, np.memmap):
        target.flush()


def mapped(meta: dict[str, Any], mode: str) -> np.ndarray:
    shape = tuple(meta["shape"])
    dtype = np.dtype(meta["dtype"] if meta["dtype"] in NUMPY_DTYPES else "int16")
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(meta["file"], dtype=dtype, mode=mode, shape=shape)  # type: ignore[call-overload, no-any-return]


def blank(tensor: Any) -> None:
    """Outputs start as NaN (integers -1 or their maximum, booleans True): a kernel that writes
    nothing is caught."""
    import torch

    if tensor.is_floating_point():
        tensor.fill_(float("nan"))
    elif tensor.dtype == torch.bool:
        tensor.fill_(True)
    else:
        tensor.fill_(-1 if tensor.dtype.is_signed else torch.iinfo(tensor.dtype).max)


def empty_outputs(run: dict[str, Any], device: str) -> list[Any]:
    import torch

    return [torch.empty(m["shape"], dtype=torch_dtype(m["dtype"]), device=device)
            for m in run["outputs"]]  # fmt: skip


# --- loading the candidate --------------------------------------------------------------------


def load_triton(path: str, name: str = "kope_candidate") -> Kernel:
    spec = importlib.util.spec_from_file_location(name, Path(path).resolve())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit looks functions' globals up here
    spec.loader.exec_module(module)
    kernel = getattr(module, "kope_kernel", None)
    if not callable(kernel):
        raise TypeError("the module defines no function kope_kernel(inputs, outputs, attrs)")
    return kernel  # type: ignore[no-any-return]


class KopeTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64))]  # fmt: skip


# kope_cuda.h: the codes of kope_kernel.h, then the types only a GPU target holds.
CUDA_DTYPE_CODES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3, "uint8": 4, "bool": 5,
                    "float16": 6, "bfloat16": 7, "int8": 8, "int16": 9}  # fmt: skip


def load_cuda(path: str) -> Kernel:
    function = ctypes.CDLL(str(Path(path).resolve())).kope_kernel
    function.restype = ctypes.c_int

    def call(inputs: list[Any], outputs: list[Any], attrs: list[float]) -> int:
        keep: list[Any] = []
        given, taken = structs(inputs, keep), structs(outputs, keep)
        values = (ctypes.c_double * max(1, len(attrs)))(*attrs)
        return int(function(given, len(inputs), taken, len(outputs), values, len(attrs)))

    return call


def structs(tensors: list[Any], keep: list[Any]) -> Any:
    array = (KopeTensor * max(1, len(tensors)))()
    for slot, tensor in zip(array, tensors, strict=False):
        shape = (ctypes.c_int64 * max(1, tensor.dim()))(*tensor.shape)
        strides = (ctypes.c_int64 * max(1, tensor.dim()))(*tensor.stride())
        keep += [shape, strides]
        slot.data, slot.ndim = tensor.data_ptr(), tensor.dim()
        slot.dtype = CUDA_DTYPE_CODES[str(tensor.dtype).removeprefix("torch.")]
        slot.shape, slot.strides = shape, strides
    return array


def load_candidate(manifest: dict[str, Any]) -> Kernel:
    if manifest["kind"] == "cuda":
        return load_cuda(manifest["candidate"])
    return load_triton(manifest["candidate"])


# --- one checked call --------------------------------------------------------------------------


class TorchCalls:
    """PyTorch functions the candidate's own file calls while the launcher runs."""

    def __init__(self, candidate_file: str) -> None:
        from torch.overrides import TorchFunctionMode

        self.file = candidate_file
        self.seen: list[str] = []
        calls = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:  # fmt: skip
                caller = sys._getframe(1).f_code.co_filename
                name = getattr(func, "__name__", str(func))
                if caller == calls.file and name not in ALLOWED_TORCH:
                    calls.seen.append(name)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()


def checked_call(kernel: Kernel, inputs: list[Any], outputs: list[Any], attrs: list[float],
                 manifest: dict[str, Any]) -> tuple[int, list[str]]:  # fmt: skip
    """(status, problems): the call, then the runtime rules against the known GPU hacks."""
    import torch

    on_gpu = manifest["device"] == "cuda"
    pointers = [t.data_ptr() for t in outputs]
    threads = {t.ident for t in threading.enumerate()}
    stream = torch.cuda.current_stream() if on_gpu else None
    calls = TorchCalls(str(Path(manifest["candidate"]).resolve()))
    try:
        with calls.mode:
            returned = kernel(inputs, outputs, attrs)
        if on_gpu:
            torch.cuda.synchronize()
    except Exception as error:  # the candidate may raise anything
        return 1, [f"{type(error).__name__}: {error}"[:600] + where(error, manifest)]
    problems = []
    if manifest["kind"] == "cuda":
        if returned != 0:
            problems.append(f"kope_kernel returned {returned}")
    elif returned is not None:
        problems.append("the launcher returned a value: it must write into `outputs` and "
                        "return None (lazy or substituted outputs are not accepted)")  # fmt: skip
    if calls.seen:
        names = ", ".join(sorted(set(calls.seen)))
        problems.append(f"the launcher called PyTorch to compute ({names}): only Triton "
                        "kernels may do the work")  # fmt: skip
    new_threads = {t.ident for t in threading.enumerate()} - threads
    if new_threads:
        problems.append(f"the launcher left {len(new_threads)} background thread(s) running")
    if on_gpu and torch.cuda.current_stream() != stream:
        problems.append("the launcher changed the current CUDA stream")
    if [t.data_ptr() for t in outputs] != pointers:
        problems.append("an output tensor was replaced or re-pointed (aliased output)")
    return (2 if problems else 0), problems


def where(error: BaseException, manifest: dict[str, Any]) -> str:
    """The candidate's line the error came through, when there is one."""
    name = Path(manifest["candidate"]).name
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(name)]
    return f" ({name} line {frames[-1].lineno})" if frames else ""


# --- correctness ------------------------------------------------------------------------------


def prepare(manifest: dict[str, Any]) -> list[tuple[dict[str, Any], list[Any], list[Any]]]:
    device = manifest["device"]
    return [(run, [read_tensor(m, device) for m in run["inputs"]], empty_outputs(run, device))
            for run in manifest["runs"]]  # fmt: skip


def start_device(manifest: dict[str, Any]) -> None:
    import torch

    if manifest["device"] == "cuda":
        torch.cuda.init()  # type: ignore[no-untyped-call]
        torch.empty(1, device="cuda").fill_(0)
        torch.cuda.synchronize()


def compile_first(kernel: Kernel, prepared: list[Any]) -> None:
    """On a device: one call per run on copies, so Triton compiles before the filter goes on."""
    for run, inputs, outputs in prepared:
        try:
            kernel([t.clone() for t in inputs], [t.clone() for t in outputs], run["attrs"])
        except Exception:  # noqa: S112 (the counted call reports it)
            continue


def correctness(manifest: dict[str, Any]) -> dict[str, Any]:
    import torch  # noqa: F401 (before the filter: importing opens and maps many files)

    if manifest["kind"] == "triton":
        import triton  # type: ignore[import-untyped]  # noqa: F401

    prepared = prepare(manifest)
    start_device(manifest)
    kernel = preload(manifest, prepared)
    files = [([mapped(m, "r+") for m in run["inputs"]], [mapped(m, "w+") for m in run["outputs"]])
             for run, _, _ in prepared]  # fmt: skip
    seccomp.install(GPU_HARNESS_CALLS)
    if kernel is None:
        kernel = load_candidate(manifest)
    statuses, problems = {}, {}
    for (run, inputs, outputs), (input_files, output_files) in zip(prepared, files, strict=True):
        for tensor in outputs:
            blank(tensor)
        say(f"start {run['run_id']}")
        status, found = checked_call(kernel, inputs, outputs, run["attrs"], manifest)
        for tensor, target in zip(inputs + outputs, input_files + output_files, strict=True):
            write_tensor(tensor, target)  # the judge hashes inputs and compares outputs
        statuses[run["run_id"]], problems[run["run_id"]] = status, found
        say(f"done {run['run_id']} {status}")
    return {"statuses": statuses, "problems": problems}


def preload(manifest: dict[str, Any], prepared: list[Any]) -> Kernel | None:
    """On a device the candidate is loaded and compiled before the filter; None on the CPU."""
    if manifest["device"] != "cuda":
        return None
    kernel = load_candidate(manifest)
    if manifest["kind"] == "triton":
        compile_first(kernel, prepared)
    return kernel


# --- timing: CUDA events after a full synchronize, L2 flushed before every call -------------


def timing(manifest: dict[str, Any]) -> dict[str, Any]:
    import torch

    from apps.operators.reference_loading import LOADERS

    plan = manifest["timing"]
    reference = LOADERS[plan["reference"]["kind"]](plan["reference"]["source"])
    (run, inputs, outputs), = prepare({**manifest, "runs": [plan["run"]]})  # fmt: skip
    start_device(manifest)
    given = list(inputs) + list(plan["scalars"])
    reference.compute(given, run["params"])  # PyTorch's first call allocates and initialises
    kernel = load_candidate(manifest)
    compile_first(kernel, [(run, inputs, outputs)])
    last_files = [mapped(m, "w+") for m in plan["last_outputs"]]
    flush = torch.empty(int(plan["flush_bytes"]) // 4, dtype=torch.float32, device="cuda")
    seccomp.install(GPU_HARNESS_CALLS)
    samples = measure(kernel, inputs, outputs, run, manifest, flush,
                      lambda: reference.compute(given, run["params"]))  # fmt: skip
    for tensor in outputs:
        blank(tensor)
    status, problems = checked_call(kernel, inputs, outputs, run["attrs"], manifest)
    for tensor, target in zip(outputs, last_files, strict=True):
        write_tensor(tensor, target)
    return {**samples, "last_status": status, "problems": problems}


def measure(kernel: Kernel, inputs: list[Any], outputs: list[Any], run: dict[str, Any],
            manifest: dict[str, Any], flush: Any,
            reference: Callable[[], Any]) -> dict[str, list[float]]:  # fmt: skip
    samples: dict[str, list[float]] = {"candidate_ms": [], "reference_ms": [],
                                       "candidate_wall_ms": []}  # fmt: skip
    warmup, repeats = int(manifest["warmup"]), int(manifest["repeats"])
    for iteration in range(warmup + repeats):
        order = ("reference", "candidate") if iteration % 2 == 0 else ("candidate", "reference")
        for who in order:
            call = reference if who == "reference" else (
                lambda: kernel(inputs, outputs, run["attrs"]))  # fmt: skip
            elapsed, wall = timed_call(call, flush)
            if iteration >= warmup:
                samples[f"{who}_ms"].append(elapsed)
                if who == "candidate":
                    samples["candidate_wall_ms"].append(wall)
    return samples


def timed_call(call: Callable[[], Any], flush: Any) -> tuple[float, float]:
    """(CUDA-event milliseconds, host milliseconds to a full synchronize) of one call."""
    import torch

    flush.zero_()  # a buffer larger than the L2: nothing the last call touched stays cached
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    began = time.perf_counter()
    start.record()
    call()
    end.record()
    torch.cuda.synchronize()  # the whole device: work on any other stream is waited for too
    return float(start.elapsed_time(end)), (time.perf_counter() - began) * 1e3


# --- profile: a torch.profiler kernel timeline (and Nsight Compute, which wraps this run) ----


def profile(manifest: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    (run, inputs, outputs), = prepare(manifest)  # fmt: skip
    start_device(manifest)
    kernel = load_candidate(manifest)
    for _ in range(3):
        kernel(inputs, outputs, run["attrs"])
    torch.cuda.synchronize()
    with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as recorded:
        for _ in range(int(manifest.get("calls", 5))):
            kernel(inputs, outputs, run["attrs"])
        torch.cuda.synchronize()
    recorded.export_chrome_trace(manifest["trace_file"])
    return {"kernels": kernel_table(recorded)}


def kernel_table(recorded: Any) -> list[dict[str, Any]]:
    rows = []
    for event in recorded.key_averages():
        device_us = float(getattr(event, "device_time_total", 0.0) or 0.0)
        if device_us > 0:
            rows.append({"name": event.key[:200], "calls": int(event.count),
                         "device_us": device_us})  # fmt: skip
    return sorted(rows, key=lambda r: -r["device_us"])[:50]


# --- check: trusted starting kernels against their references, many operators in one process -


def check(manifest: dict[str, Any]) -> dict[str, Any]:
    """For the built-in suite's own kernels (like cpu_c/check.py): reference and candidate share
    this process, so it is no defence against a hostile kernel; the evaluator is."""
    import torch  # noqa: F401

    if manifest["device"] == "cpu":
        import triton  # noqa: F401

        seccomp.install(GPU_HARNESS_CALLS)
    start_device(manifest)
    return {"operators": [check_operator(item, index, manifest)
                          for index, item in enumerate(manifest["operators"])]}  # fmt: skip


def check_operator(item: dict[str, Any], index: int, manifest: dict[str, Any]) -> dict[str, Any]:
    from apps.operators.reference_loading import LOADERS

    try:
        reference = LOADERS[item["reference"]["kind"]](item["reference"]["source"])
        kernel = load_triton(item["candidate"], f"kope_candidate_{index}")
    except Exception as error:  # the module may raise anything
        return {"error": f"{type(error).__name__}: {error}"[:600]}
    where = {**manifest, "candidate": item["candidate"]}
    return {"cases": [check_case(reference, kernel, case, item, where) for case in item["cases"]]}


def check_case(reference: Any, kernel: Kernel, case: dict[str, Any], item: dict[str, Any],
               manifest: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    import torch

    from apps.operators.reference_loading import as_list
    from apps.operators.refrun import compare, scalar_attributes, tensors

    generator = torch.Generator().manual_seed(int(manifest["seed"]))
    made = reference.make_inputs(case["params"], generator)
    expected = as_list(reference.compute([v.clone() if isinstance(v, torch.Tensor) else v
                                           for v in made], case["params"]))  # fmt: skip
    snapshot = [t.clone() for t in tensors(made)]
    inputs = [t.to(manifest["device"]) for t in tensors(made)]
    size = sum(t.numel() for t in inputs + expected)
    if manifest["device"] == "cpu" and size > int(manifest["max_elements"]):
        return {"case_id": case["case_id"], "skipped": True}
    outputs = [torch.empty_like(e, device=manifest["device"]) for e in expected]
    for tensor in outputs:
        blank(tensor)
    attrs = case["attrs"] + scalar_attributes(made)
    status, problems = checked_call(kernel, inputs, outputs, attrs, manifest)
    if status != 0:
        return {"case_id": case["case_id"], "error": "; ".join(problems)}
    request = {"max_abs": item["max_abs"], "max_rel": item["max_rel"]}
    actual = [t.cpu() for t in outputs]
    result = compare(actual, expected, [t.cpu() for t in inputs], snapshot, request, reference,
                     case)  # fmt: skip
    return {"case_id": case["case_id"], "check": result}


MODES = {"correctness": correctness, "timing": timing, "profile": profile, "check": check}


def main() -> None:
    manifest = json.loads(Path(sys.argv[1]).read_text())
    result = MODES[manifest["mode"]](manifest)
    say("result " + json.dumps(result))


if __name__ == "__main__":
    main()
