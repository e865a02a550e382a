"""The one way to start a process that touches untrusted code, and what confines each step.

Candidate kernels and imported references are outside code. Every process that compiles,
reads, loads, runs, profiles or debugs them is started here, by `start` or `run`, under its
step's policy: a fresh network namespace, the sandbox user (when the worker is root), a
cleared environment with only the step's variables, Landlock over its files (read, execute
and write, each only where the step needs it), resource limits, a SIGKILL when the worker
dies, and a seccomp launch filter; the harness and the reference runner narrow it further
with a filter of their own once they have set up. A new tool is a new row in POLICIES, never
a Popen of its own (tests/devices/test_trust_boundary.py keeps it so). Standard library only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, BinaryIO

from apps.sandbox import jail, seccomp, workdirs
from apps.sandbox.interpreter import sandbox_python
from apps.sandbox.jail import Limits
from apps.sandbox.landlock import Files, landlock_abi

ROOT = Path(__file__).resolve().parents[2]


class Step(StrEnum):
    COMPILE = "compile"
    VET = "vet"
    HARNESS = "harness"
    PROFILE = "profile"
    DEBUG = "debug"
    REFERENCE = "reference"
    GPU_COMPILE = "gpu-compile"
    GPU_HARNESS = "gpu-harness"


class SandboxUnavailable(RuntimeError):
    """This host cannot confine the step as its policy says; nothing was started."""


@dataclass(frozen=True)
class Policy:
    step: Step
    program: str  # what runs, for the sandbox table in docs/evaluator.md and error messages
    files: Callable[[], Files] | None  # None: no Landlock (the GPU steps, for now)
    environment: frozenset[str]  # variables a caller may set, beside BASE_ENVIRONMENT's
    launch_filter: seccomp.Profile | None  # installed before the program starts
    own_filter: seccomp.Profile | None = None  # installed by the program once set up
    default_limits: Limits = field(default_factory=Limits)


# --- the files of each step -------------------------------------------------------------------

# The system's libraries (each program's and the loader's), and the loader's cache.
SYSTEM_LIBRARIES = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32",
                    "/libx32", "/etc/ld.so.cache")  # fmt: skip
# Every dynamically linked program needs its loader executable (the kernel opens it for exec).
LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-x86-64.so.2")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
SYSTEM_INCLUDES = ("/usr/include", "/usr/local/include")


def programs(*names: str) -> tuple[str, ...]:
    """The files `names` resolve to on PATH (Landlock rules follow links to their targets)."""
    found = (shutil.which(name, path="/usr/bin:/bin") for name in names)
    return tuple(str(Path(path).resolve()) for path in found if path)


def compile_files() -> Files:
    """gcc, its parts (cc1, collect2, as, ld) and the system's headers and libraries: no
    /etc, /proc, /dev or home folder, so an #include of anything else fails unread."""
    return Files(
        readable=(*SYSTEM_INCLUDES, *SYSTEM_LIBRARIES, "/dev/null"),
        executable=(
            *programs("gcc", "cc", "as", "ld"),
            "/usr/lib/gcc",
            "/usr/libexec/gcc",
            *LOADERS,
        ),
    )


def vet_files() -> Files:
    return Files(readable=SYSTEM_LIBRARIES, executable=(*programs("nm", "objdump"), *LOADERS))


@functools.cache
def python_paths() -> tuple[str, ...]:
    """Where the interpreter and its packages are. In the warm reference runner (a system
    interpreter given the environment's packages on PYTHONPATH) those packages are on sys.path
    only: a module imported after the fork (sympy, by the lowering) is read from there. Other
    sys.path entries (the project's root) are not for the sandbox to read."""
    interpreter, extra_paths = sandbox_python()
    packages = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    return (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *extra_paths,
            *packages, str(Path(interpreter).resolve().parent.parent / "lib"))  # fmt: skip


def python_files() -> Files:
    """The interpreter, its packages and this project's code (its folder only listed: Python
    lists each folder on its path), the system's libraries, /etc, /proc, /sys and a few
    devices. Nothing but the interpreter may be executed."""
    interpreter = str(Path(sandbox_python()[0]).resolve())
    return Files(
        readable=(
            "/usr",
            *SYSTEM_LIBRARIES,
            "/bin",
            "/sbin",
            "/etc",
            "/proc",
            "/sys",
            *DEVICES,
            *python_paths(),
            str(ROOT / "apps"),
        ),
        executable=(interpreter, *LOADERS),
        listable=(str(ROOT),),
    )


def valgrind_launcher() -> str:
    """Debian's `valgrind` is a shell script around `valgrind.bin`: run the launcher itself,
    so no shell need be executable."""
    script = shutil.which("valgrind", path="/usr/bin:/bin") or "valgrind"
    binary = Path(f"{script}.bin")
    return str(binary) if binary.exists() else script


def profile_files() -> Files:
    return Files(
        readable=(*SYSTEM_LIBRARIES, "/proc", "/sys", *DEVICES),
        executable=(
            str(Path(valgrind_launcher()).resolve()),
            "/usr/libexec/valgrind",
            "/usr/lib/x86_64-linux-gnu/valgrind",
            *LOADERS,
        ),
    )


def debug_files() -> Files:
    return Files(readable=(*SYSTEM_LIBRARIES, "/proc", "/sys", *DEVICES), executable=LOADERS)


# --- the policies -----------------------------------------------------------------------------

HARNESS_VARIABLES = frozenset({"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS",
                               "OMP_DYNAMIC", "MALLOC_PERTURB_", "GLIBC_TUNABLES"})  # fmt: skip
# Under a candidate's own calls: no new program, process or thread (OpenMP's threads are
# started before), no file written, no signal handler, timer or scheduling change.
CANDIDATE_CALLS = seccomp.Profile(threads=False, between_calls=False)
# The GPU harness keeps threads and signal handlers: the CUDA driver starts and sets its own.
GPU_HARNESS_CALLS = seccomp.Profile()
MB = 1024

POLICIES: dict[Step, Policy] = {
    policy.step: policy
    for policy in [
        Policy(
            Step.COMPILE,
            "gcc (the kernel; a diagnostic's driver with it)",
            compile_files,
            frozenset(),
            seccomp.Profile(programs=True, processes=True, file_writes=True, signal_others=True),
            default_limits=Limits(cpu_s=120, memory_mb=2 * MB, file_size_mb=256),
        ),
        Policy(
            Step.VET,
            "nm and objdump (the shared object's symbols, libraries and code)",
            vet_files,
            frozenset(),
            seccomp.Profile(programs=True),
            default_limits=Limits(cpu_s=30, memory_mb=MB, file_size_mb=16),
        ),
        Policy(
            Step.HARNESS,
            "python -m apps.devices.cpu_c.harness (correctness and timing)",
            python_files,
            HARNESS_VARIABLES,
            seccomp.Profile(programs=True, file_writes=True),
            CANDIDATE_CALLS,
        ),
        Policy(
            Step.PROFILE,
            "valgrind --tool=cachegrind (the kernel in a driver program)",
            profile_files,
            frozenset({"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "LD_LIBRARY_PATH"}),
            seccomp.Profile(programs=True, file_writes=True),
            # valgrind reserves much address space for itself
            default_limits=Limits(cpu_s=480, memory_mb=16 * MB, file_size_mb=256),
        ),
        Policy(
            Step.DEBUG,
            "the driver built with AddressSanitizer and UBSan",
            debug_files,
            frozenset({"OMP_NUM_THREADS", "ASAN_OPTIONS", "UBSAN_OPTIONS", "KOPE_DUMP_FILE"}),
            seccomp.Profile(programs=True, file_writes=True),
            # ASan reserves terabytes of address space for its shadow memory
            default_limits=Limits(cpu_s=480, memory_mb=2**26, file_size_mb=256),
        ),
        Policy(
            Step.REFERENCE,
            "python -m apps.operators.refrun (an operator's reference code)",
            python_files,
            frozenset({"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS"}),
            seccomp.Profile(programs=True, file_writes=True),
            seccomp.Profile(file_writes=True),
        ),
        Policy(
            Step.GPU_COMPILE,
            "nvcc (a CUDA C kernel)",
            None,
            frozenset({"LD_LIBRARY_PATH"}),
            seccomp.Profile(programs=True, processes=True, file_writes=True, signal_others=True),
            default_limits=Limits(cpu_s=300, memory_mb=16 * MB, file_size_mb=1024),
        ),
        Policy(
            Step.GPU_HARNESS,
            "python -m apps.devices.gpu.harness (Triton and CUDA C)",
            None,
            HARNESS_VARIABLES
            | {
                "TRITON_INTERPRET",
                "TRITON_CACHE_DIR",
                "TRITON_HOME",
                "CUDA_VISIBLE_DEVICES",
                "LD_LIBRARY_PATH",
            },
            None,
            seccomp.Profile(),
        ),
    ]
}


# --- starting a confined process --------------------------------------------------------------


def base_environment(workdir: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C", "LC_ALL": "C",
            "TMPDIR": str(workdir)}  # fmt: skip


def environment(step: Step, workdir: Path, values: Mapping[str, str]) -> dict[str, str]:
    """The step's whole environment: nothing of the worker's own is passed on."""
    unknown = sorted(set(values) - POLICIES[step].environment)
    if unknown:
        raise ValueError(f"the {step} step does not pass {', '.join(unknown)} to its process")
    return {**base_environment(workdir), **values}


def check_confinable() -> None:
    """Refuse (SandboxUnavailable) where a confined process could read what its worker can."""
    if os.geteuid() != 0 and not landlock_abi():
        raise SandboxUnavailable(
            f"this worker runs as uid {os.geteuid()}, not root, and the kernel has no Landlock "
            "(Linux 5.13+ with landlock in its lsm= list, and the landlock_* syscalls allowed "
            "in a container): a sandboxed process would run as the worker's uid and could "
            "read its files. Run the device worker as root or on such a kernel"
        )


def preexec(step: Step, workdir: Path, limits: Limits, extra: Files) -> Callable[[], None]:
    policy = POLICIES[step]
    files = merged(policy.files(), extra) if policy.files is not None else None
    jail.sandbox_ids()  # looked up here: NSS in a forked child of a threaded parent can hang
    return lambda: jail.confine_child(limits, str(workdir), files, policy.launch_filter)


def confine_forked(step: Step, workdir: Path, limits: Limits, *, parent: int) -> None:
    """Confine the calling process, forked a moment ago from a trusted one that set up
    before loading outside code (the warm reference runner): the step's policy, with its own
    filter in place of the launch filter, since nothing is launched."""
    policy = POLICIES[step]
    files = policy.files() if policy.files is not None else None
    jail.confine_child(limits, str(workdir), files, policy.own_filter, parent=parent)


def merged(base: Files, extra: Files) -> Files:
    return Files(*(getattr(base, f) + getattr(extra, f) for f in Files.__dataclass_fields__))


def start(
    step: Step,
    command: Sequence[str],
    *,
    workdir: Path,
    limits: Limits | None = None,
    extra: Files = Files(),  # noqa: B008 (frozen)
    env: Mapping[str, str] | None = None,
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Start `command` in `workdir` under the step's policy, in a session of its own (kill its
    group with `kill_group`). `extra`: paths this run needs beside the step's own (its input
    files, a header); `popen`: stdin, stdout, stderr and pass_fds."""
    check_confinable()
    try:
        with ctrl_c_held() as held:
            child = subprocess.Popen(
                list(command), cwd=workdir, env=environment(step, workdir, env or {}),
                start_new_session=True, close_fds=True,
                preexec_fn=preexec(step, workdir, limits or POLICIES[step].default_limits, extra),
                **{"stdin": subprocess.DEVNULL, **popen},
            )  # fmt: skip
    except subprocess.SubprocessError as error:  # the child's stderr says which part failed
        raise SandboxUnavailable(f"the {step} step could not be confined: {error}") from None
    if held:  # the caller never gets the child, so it is stopped here
        kill_group(child)
        signal.raise_signal(signal.SIGINT)  # to the handler that was there all along
    return child


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[list[int]]:
    """Hold a Ctrl-C that lands while a child is forked (the list says whether one came). A
    Popen with a preexec_fn runs the at-fork hooks, logging's among them, and a KeyboardInterrupt
    raised in a hook is printed as "Exception ignored" and lost: `evaluate` went on timing for
    minutes after its Ctrl-C (seen in CI). Only the main thread may set a handler, and an
    ignored Ctrl-C (a Celery pool process) or one handled outside Python is left as it is."""
    held: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not in_main_thread or previous in (signal.SIG_IGN, None):
        yield held
        return
    signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str  # the last OUTPUT_KEPT bytes of each
    stderr: str
    timed_out: bool

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


OUTPUT_KEPT = 1 << 20


def run(
    step: Step,
    command: Sequence[str],
    *,
    workdir: Path,
    timeout_s: float,
    limits: Limits | None = None,
    extra: Files = Files(),  # noqa: B008 (frozen)
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run to the end (or `timeout_s`, then killed with everything it started). Its output goes
    to files of this process, not to pipes a flood could fill, and only their ends are read."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            child = start(step, command, workdir=workdir, limits=limits, extra=extra, env=env,
                          stdout=out, stderr=err)  # fmt: skip
        except SandboxUnavailable as error:  # the child wrote which part failed to its stderr
            raise SandboxUnavailable(f"{error} ({tail(err, 500).strip()})") from None
        timed_out = wait_or_kill(child, timeout_s)
        return Finished(child.returncode, tail(out), tail(err), timed_out)


def tail(file: IO[bytes], limit: int = OUTPUT_KEPT) -> str:
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - limit))
    return file.read().decode(errors="replace")


def wait_or_kill(child: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether it ran past `timeout_s` (then it and its group are killed). Its group is
    killed when it ends too: nothing it started outlives it."""
    try:
        child.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        return True
    finally:
        kill_group(child)


def kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


# --- work dirs the sandbox user can write ------------------------------------------------------


def open_left_behind(path: str | Path, *, dir_fd: int | None = None) -> BinaryIO | None:
    """A file a confined step may have written, opened without following a link the step may
    have put there, or waiting on a FIFO. None when there is no such regular file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def read_left_behind(folder_fd: int, name: str, limit: int) -> bytes | None:
    """`open_left_behind` in the step's work dir (opened as `folder_fd` before the step ran),
    its first `limit` bytes."""
    file = open_left_behind(name, dir_fd=folder_fd)
    if file is None:
        return None
    with file:
        return file.read(limit)


def hand_over(folder: Path) -> None:
    """Make a folder this (root) worker created the sandbox user's, for a step to write in."""
    if os.geteuid() == 0:
        uid, gid = jail.sandbox_ids()
        os.chown(folder, uid, gid)


@contextlib.contextmanager
def workdir(prefix: str, parent: str | Path | None = None) -> Iterator[Path]:
    """A new private folder for one confined step, the sandbox user's; removed afterwards. One
    made in a shared folder (no `parent`) is claimed first, so that a worker's sweep removes it
    if this process dies (workdirs); one inside another work dir goes with that one."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    held = None
    try:
        if parent is None:
            held = workdirs.claim(folder)
        hand_over(folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if held is not None:
            held.release()
