"""apps/devices/jail.py against real child processes, and its BPF program against a tiny
interpreter. No database; install_seccomp is never called in the pytest process itself."""

from __future__ import annotations

import errno
import functools
import os
import re
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from apps.devices import jail
from apps.devices.jail import Limits, build_seccomp_filter, confine_child, sandbox_ids

REPO_ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
# processes counts every task of `nobody` on the host, so it keeps the default's headroom.
TEST_LIMITS = Limits(cpu_s=10, memory_mb=1024, open_files=64, processes=256, file_size_mb=16)
SYSCALL_HEADER = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")

# Every child starts with this; `attempt` prints an outcome the tests can compare.
CHILD_PRELUDE = """\
import ctypes, errno, os, resource, signal, socket, subprocess, sys, threading
from apps.devices.jail import install_seccomp

def attempt(action):
    try:
        action()
    except OSError as error:
        return errno.errorcode[error.errno]
    return "ok"
"""


def _runnable_by_anyone(path: str) -> bool:
    real = Path(os.path.realpath(path))
    return all(p.stat().st_mode & stat.S_IXOTH for p in [real, *real.parents])


def _child_python() -> str | None:
    """As root the child runs as `nobody`, who must be able to exec the interpreter. The
    venv's python resolves into /root/.pyenv here, and /root is 0700, so fall back to the
    system python3 (jail.py needs only the standard library)."""
    if not IS_ROOT:
        return sys.executable
    candidates = [sys.executable, shutil.which("python3", path="/usr/bin:/bin")]
    return next((c for c in candidates if c and _runnable_by_anyone(c)), None)


CHILD_PYTHON = _child_python()
needs_child_python = pytest.mark.skipif(
    CHILD_PYTHON is None, reason="no python interpreter the sandbox user can execute"
)
needs_root = pytest.mark.skipif(not IS_ROOT, reason="only root switches to the sandbox user")


def run_confined(
    code: str, limits: Limits | None, workdir: Path, *, seccomp: bool, timeout: float = 20,
    files: jail.Files | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run `code` in a child confined by confine_child(limits, files) (None: not confined),
    after install_seccomp() when `seccomp`."""
    assert CHILD_PYTHON is not None
    source = CHILD_PRELUDE + ("install_seccomp()\n" if seccomp else "") + textwrap.dedent(code)
    preexec = (
        None if limits is None else functools.partial(confine_child, limits, str(workdir), files)
    )
    return subprocess.run(
        [CHILD_PYTHON, "-c", source],
        cwd=workdir if limits is None else "/",  # confined, confine_child must get there itself
        env={"PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
        preexec_fn=preexec,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def output_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.fixture
def new_workdir() -> Iterator[Callable[[], Path]]:
    """Not tmp_path: pytest's base temp dir is 0700 and root's, so `nobody` could not enter it."""
    made: list[Path] = []

    def make() -> Path:
        path = Path(tempfile.mkdtemp(prefix="jail-test-"))
        path.chmod(0o777)
        made.append(path)
        return path

    yield make
    for path in made:
        shutil.rmtree(path)


@pytest.fixture
def workdir(new_workdir: Callable[[], Path]) -> Path:
    return new_workdir()


def with_files(workdir: Path) -> Path:
    """What the file-system cases act on, owned by the user the child runs as."""
    for name in ["readable.txt", "doomed.txt"]:
        (workdir / name).write_text("hello\n")
        give_to_sandbox_user(workdir / name)
    (workdir / "empty_dir").mkdir()
    give_to_sandbox_user(workdir / "empty_dir")
    return workdir


def give_to_sandbox_user(path: Path) -> None:
    if IS_ROOT:
        uid, gid = sandbox_ids()
        os.chown(path, uid, gid)


def own_network_namespace() -> str:
    return os.readlink("/proc/self/ns/net")


# --- the BPF program, decided by an interpreter ------------------------------------------


def decide(program: bytes, nr: int, args: tuple[int, ...] = (), arch: int | None = None) -> str:
    """Run the classic-BPF program on one seccomp_data the way the kernel would."""
    arch = jail.AUDIT_ARCH_X86_64 if arch is None else arch
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(args + (0,) * (6 - len(args))))
    code = list(jail.SOCK_FILTER.iter_unpack(program))
    pc, accumulator = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == jail.BPF_LD | jail.BPF_W | jail.BPF_ABS:
            accumulator = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op == jail.BPF_RET | jail.BPF_K:
            return _action_name(k)
        else:
            taken = _JUMPS[op](accumulator, k)
            pc += 1 + (jt if taken else jf)


_JUMPS: dict[int, Callable[[int, int], bool]] = {
    jail.BPF_JMP | jail.BPF_JEQ: lambda a, k: a == k,
    jail.BPF_JMP | jail.BPF_JGE: lambda a, k: a >= k,
    jail.BPF_JMP | jail.BPF_JSET: lambda a, k: bool(a & k),
}


def _action_name(k: int) -> str:
    if k == jail.SECCOMP_RET_ALLOW:
        return "allow"
    if k == jail.SECCOMP_RET_KILL_PROCESS:
        return "kill"
    assert k & 0xFFFF0000 == jail.SECCOMP_RET_ERRNO
    return errno.errorcode[k & 0xFFFF]


NR = jail.SYSCALLS_X86_64
OWN_PID = 4242


@pytest.mark.parametrize(
    ("nr", "args", "expected"),
    [
        (0, (), "allow"),  # read
        (NR["socket"], (socket.AF_INET, socket.SOCK_STREAM), "EPERM"),
        (NR["execve"], (), "EPERM"),
        (NR["fchmodat2"], (), "EPERM"),
        (NR["clone"], (signal.SIGCHLD,), "EPERM"),  # fork through raw clone
        (NR["clone"], (0x3D0F00,), "allow"),  # glibc pthread_create's flags
        (NR["clone"], (1 << 32 | signal.SIGCHLD,), "EPERM"),  # high bits do not help
        (NR["clone3"], (), "ENOSYS"),
        (NR["openat2"], (), "ENOSYS"),
        (NR["open"], (0, os.O_RDONLY | os.O_CLOEXEC), "allow"),
        (NR["open"], (0, os.O_WRONLY), "EPERM"),
        (NR["openat"], (0, 0, os.O_RDONLY | os.O_DIRECTORY), "allow"),
        (NR["openat"], (0, 0, os.O_RDWR), "EPERM"),
        (NR["openat"], (0, 0, os.O_RDONLY | os.O_CREAT), "EPERM"),
        (NR["openat"], (0, 0, os.O_RDONLY | os.O_TRUNC), "EPERM"),
        (NR["openat"], (0, 0, os.O_APPEND), "EPERM"),
        (NR["kill"], (OWN_PID, signal.SIGABRT), "allow"),
        (NR["kill"], (1, signal.SIGKILL), "EPERM"),
        (NR["kill"], (0, signal.SIGKILL), "EPERM"),  # the whole process group
        (NR["kill"], (2**32 - 1, signal.SIGKILL), "EPERM"),  # -1: every process it may signal
        (NR["tgkill"], (OWN_PID, OWN_PID + 1, signal.SIGABRT), "allow"),
        (NR["tgkill"], (OWN_PID + 1, OWN_PID + 1, signal.SIGABRT), "EPERM"),
        (NR["tkill"], (OWN_PID,), "EPERM"),
        (NR["rt_sigqueueinfo"], (1,), "EPERM"),
        (NR["prlimit64"], (0,), "allow"),
        (NR["prlimit64"], (OWN_PID,), "allow"),
        (NR["prlimit64"], (1,), "EPERM"),
        (NR["ioctl"], (1, jail.TIOCSTI), "EPERM"),
        (NR["ioctl"], (1, 0x5401), "allow"),  # TCGETS
        (NR["socket"] | jail.X32_SYSCALL_BIT, (), "ENOSYS"),  # the x32 alias of socket
    ],
)
def test_the_filter_decides_each_call_by_number_and_arguments(nr, args, expected) -> None:
    assert decide(build_seccomp_filter(OWN_PID), nr, args) == expected


PROTECTED = (5, 9)


@pytest.mark.parametrize(
    ("protected", "nr", "args", "expected"),
    [
        (PROTECTED, NR["close"], (5,), "EPERM"),
        (PROTECTED, NR["close"], (9,), "EPERM"),
        (PROTECTED, NR["close"], (6,), "allow"),
        (PROTECTED, NR["dup2"], (3, 9), "EPERM"),  # replacing the report channel
        (PROTECTED, NR["dup2"], (9, 3), "allow"),  # copying it is harmless
        (PROTECTED, NR["dup3"], (3, 5, 0), "EPERM"),
        (PROTECTED, NR["close_range"], (0, 2**32 - 1, 0), "EPERM"),
        ((), NR["close"], (5,), "allow"),
        ((), NR["close_range"], (0, 2**32 - 1, 0), "allow"),
    ],
)
def test_protected_descriptors_can_be_neither_closed_nor_replaced(
    protected, nr, args, expected
) -> None:
    assert decide(build_seccomp_filter(OWN_PID, protected), nr, args) == expected


def test_a_call_from_another_architecture_kills_the_process() -> None:
    audit_arch_i386 = 0x40000003
    assert decide(build_seccomp_filter(OWN_PID), 0, arch=audit_arch_i386) == "kill"


@pytest.mark.skipif(not SYSCALL_HEADER.exists(), reason="no kernel headers")
def test_the_syscall_table_matches_the_kernel_headers() -> None:
    defined = dict(re.findall(r"#define __NR_(\w+) (\d+)", SYSCALL_HEADER.read_text()))
    known = {name: int(defined[name]) for name in NR if name in defined}
    assert known == {name: NR[name] for name in known}
    assert defined["seccomp"] == str(jail.SYS_SECCOMP)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"Limits\.memory_mb must be positive"):
        Limits(memory_mb=0)


def test_a_limit_that_cannot_be_set_raises_oserror_naming_it(monkeypatch, capfd) -> None:
    def refuse(which: int, limits: tuple[int, int]) -> None:
        raise ValueError("not allowed to raise maximum limit")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    with pytest.raises(OSError, match="jail: cannot set RLIMIT_CPU to soft=60 hard=65"):
        confine_child(Limits(), "/nonexistent")
    assert "jail: cannot set RLIMIT_CPU" in capfd.readouterr().err


# --- confine_child ---------------------------------------------------------------------------


@needs_child_python
def test_the_child_gets_every_limit(workdir: Path) -> None:
    result = run_confined(
        """\
        for name in ["CPU", "AS", "NOFILE", "NPROC", "FSIZE", "CORE"]:
            print(name, *resource.getrlimit(getattr(resource, "RLIMIT_" + name)))
        """,
        TEST_LIMITS,
        workdir,
        seccomp=False,
    )
    mb = 1024 * 1024
    assert output_lines(result) == [
        "CPU 10 15",
        f"AS {1024 * mb} {1024 * mb}",
        "NOFILE 64 64",
        "NPROC 256 256",
        f"FSIZE {16 * mb} {16 * mb}",
        "CORE 0 0",
    ]


@needs_root
@needs_child_python
def test_as_root_the_child_runs_as_the_sandbox_user_in_the_work_dir(workdir: Path) -> None:
    result = run_confined(
        "print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups(), os.getcwd())",
        TEST_LIMITS,
        workdir,
        seccomp=False,
    )
    uid, gid = sandbox_ids()
    assert output_lines(result) == [f"{uid} {uid} {gid} [] {workdir}"]


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


CONNECT_TO = """\
print(os.readlink("/proc/self/ns/net"))
print(attempt(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2).close()))
"""


@needs_child_python
def test_the_child_cannot_reach_the_hosts_loopback(workdir: Path, listener: int) -> None:
    code = CONNECT_TO.format(port=listener)
    unconfined = run_confined(code, None, workdir, seccomp=False)
    confined = run_confined(code, TEST_LIMITS, workdir, seccomp=False)
    assert output_lines(unconfined) == [own_network_namespace(), "ok"]
    namespace, outcome = output_lines(confined)
    assert namespace != own_network_namespace()
    assert outcome == "ENETUNREACH"  # a fresh namespace's loopback is down


def _unprivileged_user_namespaces_work() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run(
        [unshare, "--user", "--net", "true"], preexec_fn=_become_nobody, capture_output=True
    )
    return probe.returncode == 0


def _become_nobody() -> None:
    uid, gid = sandbox_ids()
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


@needs_root
@needs_child_python
def test_an_unprivileged_caller_gets_its_network_namespace_from_a_user_namespace(
    workdir: Path, listener: int
) -> None:
    if not _unprivileged_user_namespaces_work():
        pytest.skip("this host allows no unprivileged user namespaces")
    result = subprocess.run(
        [str(CHILD_PYTHON), "-c", CHILD_PRELUDE + CONNECT_TO.format(port=listener)],
        cwd=workdir,
        env={"PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=lambda: (_become_nobody(), confine_child(TEST_LIMITS, str(workdir))),
        capture_output=True,
        text=True,
        timeout=20,
    )
    namespace, outcome = output_lines(result)
    assert namespace != own_network_namespace()
    assert outcome == "ENETUNREACH"


@needs_child_python
def test_without_any_namespace_support_confine_child_carries_on(workdir: Path) -> None:
    result = run_confined(
        f"""\
        from apps.devices import jail
        jail._try_unshare = lambda flags: False  # a host without namespaces
        os.chdir("/")
        jail.confine_child(jail.Limits(), {str(workdir)!r})
        print("survived", os.getcwd(), os.readlink("/proc/self/ns/net"))
        """,
        None,
        workdir,
        seccomp=False,
    )
    assert output_lines(result) == [f"survived {workdir} {own_network_namespace()}"]


@needs_child_python
def test_with_files_named_the_child_opens_those_and_its_work_dir_and_nothing_else(
    new_workdir: Callable[[], Path],
) -> None:
    if not jail.landlock_abi():
        pytest.skip("this kernel has no Landlock")
    workdir, beside = with_files(new_workdir()), with_files(new_workdir())
    python = str(Path(str(CHILD_PYTHON)).resolve())
    files = jail.Files(
        readable=("/usr", "/lib", "/lib64", python, str(REPO_ROOT / "apps")),
        listable=(str(REPO_ROOT),),
    )
    result = run_confined(
        f"""\
        def read(path):
            return lambda: open(path).read()
        print(attempt(read("readable.txt")), attempt(lambda: open("new.txt", "w").close()))
        print(attempt(read({str(beside / "readable.txt")!r})))  # the child's own file, elsewhere
        print(attempt(lambda: os.listdir({str(REPO_ROOT)!r})))
        print(attempt(read({str(REPO_ROOT / "pyproject.toml")!r})))
        print(attempt(read("/proc/{os.getpid()}/environ")))  # the worker's secrets
        """,
        TEST_LIMITS,
        workdir,
        seccomp=False,
        files=files,
    )
    assert output_lines(result) == ["ok ok", "EACCES", "ok", "EACCES", "EACCES"]


@needs_child_python
def test_the_cpu_limit_stops_an_endless_loop(workdir: Path) -> None:
    started = time.monotonic()
    result = run_confined("while True: pass", Limits(cpu_s=1), workdir, seccomp=True)
    assert result.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
    assert time.monotonic() - started < 1 + jail.CPU_GRACE_S + 2


@needs_child_python
def test_the_memory_limit_refuses_a_huge_allocation_and_the_child_survives(
    workdir: Path,
) -> None:
    result = run_confined(
        """\
        try:
            bytearray(2**30)  # twice the limit, yet small enough to succeed without it
        except MemoryError:
            print("MemoryError")
        print("alive", len(bytearray(10**6)))
        """,
        Limits(memory_mb=512),
        workdir,
        seccomp=True,
    )
    assert output_lines(result) == ["MemoryError", "alive 1000000"]


@needs_child_python
def test_the_file_size_limit_stops_a_growing_file(workdir: Path) -> None:
    result = run_confined(
        """\
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        with open("big.bin", "wb", buffering=0) as big:
            big.write(bytes(1024 * 1024))
            print(attempt(lambda: big.write(b"one byte too many")))
        print(os.path.getsize("big.bin"))
        """,
        Limits(file_size_mb=1),
        workdir,
        seccomp=False,
    )
    assert output_lines(result) == ["EFBIG", str(1024 * 1024)]


# --- install_seccomp ----------------------------------------------------------------------

FORBIDDEN = {
    "socket": "socket.socket().close()",
    "socketpair": "socket.socketpair()",
    "fork": """\
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        """,
    "fork through a raw clone": """\
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.syscall(56, signal.SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        if pid < 0:
            raise OSError(ctypes.get_errno(), "clone")
        os.waitpid(pid, 0)
        """,
    "subprocess": 'subprocess.run(["/bin/true"], check=True)',
    "execve": 'os.execv("/bin/echo", ["echo", "ok"])',  # unfiltered, echo prints the "ok"
    "open for writing": 'open("readable.txt", "w").close()',
    "open for appending": 'open("readable.txt", "a").close()',
    "open read-write": 'os.close(os.open("readable.txt", os.O_RDWR))',
    "create read-only": 'os.close(os.open("new.txt", os.O_RDONLY | os.O_CREAT))',
    "truncate": 'os.truncate("readable.txt", 0)',
    "mkdir": 'os.mkdir("new_dir")',
    "rmdir": 'os.rmdir("empty_dir")',
    "unlink": 'os.unlink("doomed.txt")',
    "rename": 'os.rename("doomed.txt", "moved.txt")',
    "symlink": 'os.symlink("readable.txt", "link")',
    "hard link": 'os.link("readable.txt", "link")',
    "chmod": 'os.chmod("readable.txt", 0o600)',
    "memfd_create": 'os.close(os.memfd_create("code"))',
    "setuid to itself": "os.setuid(os.getuid())",
}


def _as_action(statements: str) -> str:
    return "def action():\n" + textwrap.indent(textwrap.dedent(statements), "    ")


@needs_child_python
@pytest.mark.parametrize("name", FORBIDDEN)
def test_seccomp_refuses_what_the_jail_alone_allows(
    name: str, new_workdir: Callable[[], Path]
) -> None:
    code = _as_action(FORBIDDEN[name]) + "\nprint(attempt(action))\n"
    unfiltered = run_confined(code, TEST_LIMITS, with_files(new_workdir()), seccomp=False)
    filtered = run_confined(code, TEST_LIMITS, with_files(new_workdir()), seccomp=True)
    assert output_lines(unfiltered) == ["ok"]
    assert output_lines(filtered) == ["EPERM"]


@needs_child_python
def test_reading_an_existing_file_still_works(workdir: Path) -> None:
    result = run_confined(
        'print(open("readable.txt").read().strip(), len(os.listdir(".")))',
        TEST_LIMITS,
        with_files(workdir),
        seccomp=True,
    )
    assert output_lines(result) == ["hello 3"]


@needs_child_python
def test_the_filter_is_in_force(workdir: Path) -> None:
    result = run_confined(
        'print([l for l in open("/proc/self/status") if l.startswith("Seccomp:")][0].split()[1])',
        TEST_LIMITS,
        workdir,
        seccomp=True,
    )
    assert output_lines(result) == ["2"]  # SECCOMP_MODE_FILTER


@needs_child_python
def test_threads_started_before_the_filter_get_it_too(workdir: Path) -> None:
    result = run_confined(
        """\
        go, outcome = threading.Event(), []
        def later():
            go.wait()
            outcome.append(attempt(lambda: socket.socket().close()))
        thread = threading.Thread(target=later)
        thread.start()
        install_seccomp()
        go.set()
        thread.join()
        print(outcome[0])
        """,
        TEST_LIMITS,
        workdir,
        seccomp=False,
    )
    assert output_lines(result) == ["EPERM"]


@needs_child_python
def test_without_tsync_the_filter_is_installed_by_prctl_unless_threads_would_escape(
    workdir: Path,
) -> None:
    result = run_confined(
        """\
        from apps.devices import jail
        jail._seccomp_on_all_threads = lambda fprog: False  # a kernel without TSYNC
        go = threading.Event()
        thread = threading.Thread(target=go.wait)
        thread.start()
        try:
            install_seccomp()
        except OSError as error:
            print(error)
        go.set()
        thread.join()
        install_seccomp()
        print(attempt(lambda: socket.socket().close()))
        """,
        TEST_LIMITS,
        workdir,
        seccomp=False,
    )
    assert output_lines(result) == [
        "seccomp: no TSYNC on this kernel and 2 threads would escape",
        "EPERM",
    ]


@needs_child_python
def test_python_threads_still_run(workdir: Path) -> None:
    result = run_confined(
        """\
        sums = []
        work = lambda: sums.append(sum(range(10**5)))
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(sums)
        """,
        TEST_LIMITS,
        workdir,
        seccomp=True,
    )
    assert output_lines(result) == [str([sum(range(10**5))] * 4)]


OPENMP_SOURCE = """\
#include <omp.h>

int threads_seen(void) {
    int mask = 0;
    #pragma omp parallel num_threads(4)
    {
        #pragma omp atomic
        mask |= 1 << omp_get_thread_num();
    }
    return mask;
}

long parallel_sum(long n) {
    long sum = 0;
    #pragma omp parallel for num_threads(4) reduction(+:sum)
    for (long i = 0; i < n; i++) sum += i;
    return sum;
}
"""


@pytest.fixture
def openmp_library(workdir: Path) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    source, library = workdir / "omp.c", workdir / "omp.so"
    source.write_text(OPENMP_SOURCE)
    build = subprocess.run(
        [gcc, "-O2", "-fopenmp", "-shared", "-fPIC", str(source), "-o", str(library)],
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        pytest.skip(f"gcc -fopenmp failed: {build.stderr.strip()[-300:]}")
    return library


@needs_child_python
def test_an_openmp_kernel_loaded_before_the_filter_starts_its_threads_after_it(
    workdir: Path, openmp_library: Path
) -> None:
    result = run_confined(
        f"""\
        library = ctypes.CDLL({str(openmp_library)!r})
        library.parallel_sum.restype = ctypes.c_long
        library.parallel_sum.argtypes = [ctypes.c_long]
        install_seccomp()
        print(library.threads_seen(), library.parallel_sum(10**6))
        """,
        TEST_LIMITS,
        workdir,
        seccomp=False,
    )
    assert output_lines(result) == [f"{0b1111} {10**6 * (10**6 - 1) // 2}"]


SIGNALS = """\
signal.signal(signal.SIGUSR1, lambda *_: print("handled"))
os.kill(os.getpid(), signal.SIGUSR1)
signal.raise_signal(signal.SIGUSR1)
print(attempt(lambda: os.kill(os.getppid(), 0)))
"""


@needs_child_python
def test_signals_reach_the_process_itself_but_no_other(workdir: Path) -> None:
    # Unconfined, so the child has the test's own uid and only the filter stands in the way.
    assert output_lines(run_confined(SIGNALS, None, workdir, seccomp=False))[-1] == "ok"
    result = run_confined(SIGNALS, None, workdir, seccomp=True)
    assert output_lines(result) == ["handled", "handled", "EPERM"]


@needs_child_python
def test_abort_still_works_under_the_filter(workdir: Path) -> None:
    result = run_confined("os.abort()", TEST_LIMITS, workdir, seccomp=True)
    assert result.returncode == -signal.SIGABRT
