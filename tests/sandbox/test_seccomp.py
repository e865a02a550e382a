"""apps/sandbox/seccomp.py: each profile's BPF program against a tiny interpreter, and the
filters installed in real child processes (never in the pytest process itself). No database.

Profile() is what the GPU harness and the reference runner keep (threads, signal handlers);
policies.CANDIDATE_CALLS is what the cpu harness installs before a candidate's first call: no
new thread, and nothing that lets code run between its calls (handlers, timers, alarms)."""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import textwrap
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest

from apps.sandbox import landlock, seccomp
from apps.sandbox.policies import CANDIDATE_CALLS
from apps.sandbox.seccomp import Profile
from tests.sandbox.children import (
    TEST_LIMITS,
    needs_child_python,
    output_lines,
    run_confined,
    with_files,
)

SYSCALL_HEADER = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
NR = seccomp.SYSCALLS_X86_64
OWN_PID = 4242
THREADS_AND_HANDLERS = Profile()  # the GPU harness's; the old harness filter
# What a step that runs a tool (gcc) may do, short of what every profile refuses.
EVERYTHING_ALLOWED = Profile(
    programs=True, processes=True, file_writes=True, between_calls=True, signal_others=True
)

# --- the BPF program, decided by an interpreter ------------------------------------------


def decide(program: bytes, nr: int, args: tuple[int, ...] = (), arch: int | None = None) -> str:
    """Run the classic-BPF program on one seccomp_data the way the kernel would."""
    arch = seccomp.AUDIT_ARCH_X86_64 if arch is None else arch
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(args + (0,) * (6 - len(args))))
    code = list(seccomp.SOCK_FILTER.iter_unpack(program))
    pc, accumulator = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == seccomp.BPF_LD | seccomp.BPF_W | seccomp.BPF_ABS:
            accumulator = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op == seccomp.BPF_RET | seccomp.BPF_K:
            return _action_name(k)
        else:
            taken = _JUMPS[op](accumulator, k)
            pc += 1 + (jt if taken else jf)


_JUMPS: dict[int, Callable[[int, int], bool]] = {
    seccomp.BPF_JMP | seccomp.BPF_JEQ: lambda a, k: a == k,
    seccomp.BPF_JMP | seccomp.BPF_JGE: lambda a, k: a >= k,
    seccomp.BPF_JMP | seccomp.BPF_JSET: lambda a, k: bool(a & k),
}


def _action_name(k: int) -> str:
    if k == seccomp.SECCOMP_RET_ALLOW:
        return "allow"
    if k == seccomp.SECCOMP_RET_KILL_PROCESS:
        return "kill"
    assert k & 0xFFFF0000 == seccomp.SECCOMP_RET_ERRNO
    return errno.errorcode[k & 0xFFFF]


def decided(profile: Profile, name: str, *args: int, protected: tuple[int, ...] = ()) -> str:
    return decide(seccomp.build_filter(profile, OWN_PID, protected), NR[name], args)


PTHREAD_CREATE_FLAGS = 0x3D0F00  # glibc's clone flags for a thread: CLONE_THREAD among them
A_POINTER = 0x7FFD_1234_5678  # a user-space address, as a struct sigaction's


@pytest.mark.parametrize(
    ("nr", "args", "expected"),
    [
        (0, (), "allow"),  # read
        (NR["socket"], (socket.AF_INET, socket.SOCK_STREAM), "EPERM"),
        (NR["execve"], (), "EPERM"),
        (NR["fchmodat2"], (), "EPERM"),
        (NR["clone"], (signal.SIGCHLD,), "EPERM"),  # fork through raw clone
        (NR["clone"], (PTHREAD_CREATE_FLAGS,), "allow"),
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
        (NR["ioctl"], (1, seccomp.TIOCSTI), "EPERM"),
        (NR["ioctl"], (1, 0x5401), "allow"),  # TCGETS
        (NR["socket"] | seccomp.X32_SYSCALL_BIT, (), "ENOSYS"),  # the x32 alias of socket
        # threads and what runs between calls stay allowed in this profile
        (NR["rt_sigaction"], (signal.SIGUSR1, A_POINTER, 0), "allow"),
        (NR["timer_create"], (1, 0, A_POINTER), "allow"),
        (NR["setitimer"], (0, A_POINTER, 0), "allow"),
    ],
)
def test_the_filter_decides_each_call_by_number_and_arguments(
    nr: int, args: tuple[int, ...], expected: str
) -> None:
    program = seccomp.build_filter(THREADS_AND_HANDLERS, OWN_PID)
    assert decide(program, nr, args) == expected


@pytest.mark.parametrize(
    "name",
    ["timer_create", "timer_settime", "setitimer", "alarm", "timerfd_create",
     "timerfd_settime", "signalfd", "signalfd4", "sigaltstack", "sched_setaffinity",
     "sched_setscheduler", "sched_setparam", "sched_setattr", "setpriority",
     "set_mempolicy", "mbind"],
)  # fmt: skip
def test_the_candidates_profile_refuses_what_would_run_or_slow_code_between_its_calls(
    name: str,
) -> None:
    assert decided(THREADS_AND_HANDLERS, name) == "allow"
    assert decided(CANDIDATE_CALLS, name) == "EPERM"


@pytest.mark.parametrize(
    ("act", "expected"),
    [
        (0, "allow"),  # rt_sigaction(sig, NULL, &old) only reads the handler
        (A_POINTER, "EPERM"),
        (0x1000, "EPERM"),
        (1 << 32, "EPERM"),  # a pointer whose low half is zero is a pointer all the same
    ],
)
def test_the_candidates_profile_refuses_a_new_signal_handler_and_lets_it_read_one(
    act: int, expected: str
) -> None:
    assert decided(CANDIDATE_CALLS, "rt_sigaction", signal.SIGALRM, act, A_POINTER) == expected


@pytest.mark.parametrize(
    ("profile", "flags", "expected"),
    [
        (THREADS_AND_HANDLERS, PTHREAD_CREATE_FLAGS, "allow"),
        (THREADS_AND_HANDLERS, signal.SIGCHLD, "EPERM"),  # a process, not a thread
        (CANDIDATE_CALLS, PTHREAD_CREATE_FLAGS, "EPERM"),  # no new thread at all
        (CANDIDATE_CALLS, signal.SIGCHLD, "EPERM"),
        (Profile(processes=True), signal.SIGCHLD, "allow"),  # gcc's driver starts its parts
        (Profile(processes=True, threads=False), PTHREAD_CREATE_FLAGS, "allow"),
    ],
)
def test_clone_makes_a_thread_or_a_process_only_where_the_profile_says(
    profile: Profile, flags: int, expected: str
) -> None:
    assert decided(profile, "clone", flags) == expected


@pytest.mark.parametrize(
    ("profile", "name", "args"),
    [
        (Profile(programs=True), "execve", ()),
        (Profile(programs=True), "execveat", ()),
        (Profile(processes=True), "fork", ()),
        (Profile(processes=True), "vfork", ()),
        (Profile(file_writes=True), "openat", (0, 0, os.O_WRONLY | os.O_CREAT)),
        (Profile(file_writes=True), "unlink", ()),
        (Profile(file_writes=True), "rename", ()),
        (Profile(signal_others=True), "kill", (1, signal.SIGTERM)),
        (Profile(signal_others=True), "tgkill", (OWN_PID + 1, OWN_PID + 1, signal.SIGTERM)),
    ],
)
def test_each_permission_of_a_profile_allows_its_calls_and_only_there(
    profile: Profile, name: str, args: tuple[int, ...]
) -> None:
    assert decided(profile, name, *args) == "allow"
    assert decided(THREADS_AND_HANDLERS, name, *args) == "EPERM"


@pytest.mark.parametrize("name", seccomp.ALWAYS_DENIED)
def test_what_no_step_needs_is_refused_under_every_profile(name: str) -> None:
    assert decided(EVERYTHING_ALLOWED, name) == "EPERM"
    assert decided(CANDIDATE_CALLS, name) == "EPERM"


@pytest.mark.parametrize(
    "settings", list(itertools.product([False, True], repeat=len(fields(Profile))))
)
def test_every_profile_builds_a_filter_whose_jumps_land(settings: tuple[bool, ...]) -> None:
    profile = Profile(*settings)
    program = seccomp.build_filter(profile, OWN_PID, protected_fds=(5, 9))
    assert decide(program, 0) == "allow"  # read
    assert decide(program, NR["socket"], (socket.AF_INET,)) == "EPERM"
    assert decide(program, NR["close"], (9,)) == "EPERM"
    assert decide(program, NR["close"], (6,)) == "allow"


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
    protected: tuple[int, ...], nr: int, args: tuple[int, ...], expected: str
) -> None:
    program = seccomp.build_filter(CANDIDATE_CALLS, OWN_PID, protected)  # as the harness does
    assert decide(program, nr, args) == expected


def test_a_call_from_another_architecture_kills_the_process() -> None:
    audit_arch_i386 = 0x40000003
    for profile in (THREADS_AND_HANDLERS, CANDIDATE_CALLS, EVERYTHING_ALLOWED):
        program = seccomp.build_filter(profile, OWN_PID)
        assert decide(program, 0, arch=audit_arch_i386) == "kill"


@pytest.mark.skipif(not SYSCALL_HEADER.exists(), reason="no kernel headers")
def test_the_syscall_table_matches_the_kernel_headers() -> None:
    defined = dict(re.findall(r"#define __NR_(\w+) (\d+)", SYSCALL_HEADER.read_text()))
    known = {name: int(defined[name]) for name in NR if name in defined}
    assert known == {name: NR[name] for name in known}
    assert defined["seccomp"] == str(seccomp.SYS_SECCOMP)
    assert defined["landlock_create_ruleset"] == str(landlock.SYS_LANDLOCK_CREATE_RULESET)
    assert defined["landlock_add_rule"] == str(landlock.SYS_LANDLOCK_ADD_RULE)
    assert defined["landlock_restrict_self"] == str(landlock.SYS_LANDLOCK_RESTRICT_SELF)


# --- filters installed in a child ------------------------------------------------------------

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
BOTH_HARNESS_PROFILES = pytest.mark.parametrize(
    "profile", [THREADS_AND_HANDLERS, CANDIDATE_CALLS], ids=["threads", "candidate"]
)


def _as_action(statements: str) -> str:
    return "def action():\n" + textwrap.indent(textwrap.dedent(statements), "    ")


@needs_child_python
@BOTH_HARNESS_PROFILES
@pytest.mark.parametrize("name", FORBIDDEN)
def test_seccomp_refuses_what_the_jail_alone_allows(
    name: str, profile: Profile, new_workdir: Callable[[], Path]
) -> None:
    code = _as_action(FORBIDDEN[name]) + "\nprint(attempt(action))\n"
    unfiltered = run_confined(code, TEST_LIMITS, with_files(new_workdir()))
    filtered = run_confined(code, TEST_LIMITS, with_files(new_workdir()), filtered=profile)
    assert output_lines(unfiltered) == ["ok"]
    assert output_lines(filtered) == ["EPERM"]


@needs_child_python
@BOTH_HARNESS_PROFILES
def test_reading_an_existing_file_still_works(workdir: Path, profile: Profile) -> None:
    result = run_confined(
        'print(open("readable.txt").read().strip(), len(os.listdir(".")))',
        TEST_LIMITS,
        with_files(workdir),
        filtered=profile,
    )
    assert output_lines(result) == ["hello 3"]


@needs_child_python
def test_the_filter_is_in_force(workdir: Path) -> None:
    result = run_confined(
        'print([l for l in open("/proc/self/status") if l.startswith("Seccomp:")][0].split()[1])',
        TEST_LIMITS,
        workdir,
        filtered=CANDIDATE_CALLS,
    )
    assert output_lines(result) == ["2"]  # SECCOMP_MODE_FILTER


@needs_child_python
def test_threads_started_before_the_filter_get_it_too(workdir: Path) -> None:
    result = run_confined(
        f"""\
        go, outcome = threading.Event(), []
        def later():
            go.wait()
            outcome.append(attempt(lambda: socket.socket().close()))
        thread = threading.Thread(target=later)
        thread.start()
        seccomp.install({CANDIDATE_CALLS!r})
        go.set()
        thread.join()
        print(outcome[0])
        """,
        TEST_LIMITS,
        workdir,
    )
    assert output_lines(result) == ["EPERM"]


@needs_child_python
def test_without_tsync_the_filter_is_installed_by_prctl_unless_threads_would_escape(
    workdir: Path,
) -> None:
    result = run_confined(
        """\
        seccomp._seccomp_on_all_threads = lambda fprog: False  # a kernel without TSYNC
        go = threading.Event()
        thread = threading.Thread(target=go.wait)
        thread.start()
        try:
            seccomp.install(Profile())
        except OSError as error:
            print(error)
        go.set()
        thread.join()
        seccomp.install(Profile())
        print(attempt(lambda: socket.socket().close()))
        """,
        TEST_LIMITS,
        workdir,
    )
    assert output_lines(result) == [
        "seccomp: no TSYNC on this kernel and 2 threads would escape",
        "EPERM",
    ]


THREADS = """\
sums = []
work = lambda: sums.append(sum(range(10**5)))
threads = [threading.Thread(target=work) for _ in range(4)]
try:
    for thread in threads:
        thread.start()
except RuntimeError as error:
    print(error)
for thread in threads:
    if thread.ident is not None:
        thread.join()
print(sums)
"""


@needs_child_python
def test_python_threads_still_run_where_the_profile_allows_threads(workdir: Path) -> None:
    result = run_confined(THREADS, TEST_LIMITS, workdir, filtered=THREADS_AND_HANDLERS)
    assert output_lines(result) == [str([sum(range(10**5))] * 4)]


@needs_child_python
def test_under_the_candidates_profile_no_new_thread_starts(workdir: Path) -> None:
    result = run_confined(THREADS, TEST_LIMITS, workdir, filtered=CANDIDATE_CALLS)
    assert output_lines(result) == ["can't start new thread", "[]"]


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


def openmp_child(library: Path, profile: Profile, *, warm_up: bool) -> str:
    """Load the kernel, maybe run one parallel region (as the harness's confine_calls does),
    install the filter, then call the kernel."""
    return f"""\
        library = ctypes.CDLL({str(library)!r})
        library.parallel_sum.restype = ctypes.c_long
        library.parallel_sum.argtypes = [ctypes.c_long]
        if {warm_up!r}:
            library.threads_seen()
        seccomp.install({profile!r})
        print(library.threads_seen(), library.parallel_sum(10**6), flush=True)
        """


EVERY_THREAD_AND_THE_SUM = f"{0b1111} {10**6 * (10**6 - 1) // 2}"


@needs_child_python
def test_an_openmp_kernel_loaded_before_the_filter_starts_its_threads_after_it(
    workdir: Path, openmp_library: Path
) -> None:
    code = openmp_child(openmp_library, THREADS_AND_HANDLERS, warm_up=False)
    result = run_confined(code, TEST_LIMITS, workdir)
    assert output_lines(result) == [EVERY_THREAD_AND_THE_SUM]


@needs_child_python
def test_under_the_candidates_profile_openmp_runs_on_the_threads_started_before_it(
    workdir: Path, openmp_library: Path
) -> None:
    warmed = run_confined(
        openmp_child(openmp_library, CANDIDATE_CALLS, warm_up=True), TEST_LIMITS, workdir
    )
    cold = run_confined(
        openmp_child(openmp_library, CANDIDATE_CALLS, warm_up=False), TEST_LIMITS, workdir
    )
    assert output_lines(warmed) == [EVERY_THREAD_AND_THE_SUM]
    assert cold.returncode != 0 and cold.stdout == ""
    assert "Thread creation failed: Operation not permitted" in cold.stderr


SIGNALS = """\
signal.signal(signal.SIGUSR1, lambda *_: print("handled"))
os.kill(os.getpid(), signal.SIGUSR1)
signal.raise_signal(signal.SIGUSR1)
print(attempt(lambda: os.kill(os.getppid(), 0)))
"""


@needs_child_python
def test_signals_reach_the_process_itself_but_no_other(workdir: Path) -> None:
    # Unconfined, so the child has the test's own uid and only the filter stands in the way.
    assert output_lines(run_confined(SIGNALS, None, workdir))[-1] == "ok"
    result = run_confined(SIGNALS, None, workdir, filtered=THREADS_AND_HANDLERS)
    assert output_lines(result) == ["handled", "handled", "EPERM"]


# Each call that could run code, or make other code slow, between a kernel's calls; and the
# one read of a handler that stays allowed. The timer ones get a real timer where they may.
BETWEEN_CALLS = f"""\
old = ctypes.create_string_buffer(64)  # struct sigaction, or room for it
act = ctypes.create_string_buffer(64)  # SIG_DFL, no flags: a new handler all the same
timer = ctypes.c_int(-1)
zero = ctypes.create_string_buffer(32)  # struct itimerspec / itimerval of zeros: disarmed
def close(fd):
    os.close(fd)
print("rt_sigaction read", attempt(lambda: raw({NR["rt_sigaction"]}, signal.SIGUSR1, 0,
                                               ctypes.addressof(old), 8)))
print("rt_sigaction set", attempt(lambda: raw({NR["rt_sigaction"]}, signal.SIGUSR1,
                                              ctypes.addressof(act), 0, 8)))
print("signal.signal", attempt(lambda: signal.signal(signal.SIGUSR1, lambda *_: None)))
print("alarm", attempt(lambda: raw({NR["alarm"]}, 0)))
print("setitimer", attempt(lambda: raw({NR["setitimer"]}, 0, ctypes.addressof(zero), 0)))
print("timer_create", attempt(lambda: raw({NR["timer_create"]}, 1, 0, ctypes.addressof(timer))))
print("timer_settime", attempt(lambda: raw({NR["timer_settime"]}, timer.value, 0,
                                           ctypes.addressof(zero), 0)))
print("timerfd_create", attempt(lambda: close(raw({NR["timerfd_create"]}, 1, 0))))
print("sched_setaffinity", attempt(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))))
"""
BETWEEN_CALLS_NAMES = ["rt_sigaction set", "signal.signal", "alarm", "setitimer", "timer_create",
                       "timer_settime", "timerfd_create", "sched_setaffinity"]  # fmt: skip


@needs_child_python
def test_under_the_candidates_profile_nothing_can_be_set_to_run_between_its_calls(
    workdir: Path,
) -> None:
    allowed = run_confined(BETWEEN_CALLS, TEST_LIMITS, workdir, filtered=THREADS_AND_HANDLERS)
    refused = run_confined(BETWEEN_CALLS, TEST_LIMITS, workdir, filtered=CANDIDATE_CALLS)
    assert output_lines(allowed) == [
        f"{name} ok" for name in ["rt_sigaction read", *BETWEEN_CALLS_NAMES]
    ]
    assert output_lines(refused) == [
        "rt_sigaction read ok",
        *(f"{name} EPERM" for name in BETWEEN_CALLS_NAMES),
    ]


@needs_child_python
@BOTH_HARNESS_PROFILES
def test_abort_still_works_under_the_filter(workdir: Path, profile: Profile) -> None:
    result = run_confined("os.abort()", TEST_LIMITS, workdir, filtered=profile)
    assert result.returncode == -signal.SIGABRT
