"""seccomp-BPF: which system calls a confined process may still make. Standard library only.

Each step of the sandbox (apps/sandbox/policies.py) names a `Profile`: what its program
needs (gcc runs its parts as new processes, valgrind's launcher executes its tool, the
harness needs neither). A filter is installed either before the program is executed (the
step's launch filter, in the preexec_fn) or by the program itself once it has set up (the
harness, the reference runner): filters stack, so the later one only narrows.

Every profile refuses what no step needs: sockets, other processes' memory, namespaces and
mounts, the machine (modules, kexec, reboot, swap, clock), identity changes, kernel attack
surface (bpf, io_uring, userfaultfd, perf events, keyrings). Linux x86_64 only. This is a
deny-list on top of the other layers (Landlock, uid, limits, network namespace), not a
complete allowlist.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import time
from dataclasses import dataclass

from apps.sandbox.prctl import PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, prctl


@dataclass(frozen=True)
class Profile:
    """What a process may still do under its filter, beyond what every profile allows."""

    programs: bool = False  # execve: a tool that runs its own parts (Landlock says which)
    processes: bool = False  # fork, vfork, clone without CLONE_THREAD: gcc's driver
    threads: bool = True  # clone with CLONE_THREAD; False: no new thread at all
    file_writes: bool = False  # opens that write or create; changes to the file system
    # Signal handlers, timers, alarms, timerfd/signalfd, CPU affinity, priority and memory
    # placement: what lets code run, or other code run slower, between a kernel's calls.
    between_calls: bool = True
    signal_others: bool = False  # kill/tgkill/sigqueue to another process (a tool's children)


# <linux/bpf_common.h>
BPF_LD = 0x00
BPF_JMP = 0x05
BPF_RET = 0x06
BPF_W = 0x00
BPF_ABS = 0x20
BPF_K = 0x00
BPF_JEQ = 0x10
BPF_JGE = 0x30
BPF_JSET = 0x40
# <linux/filter.h>: struct sock_filter {__u16 code; __u8 jt; __u8 jf; __u32 k;}
SOCK_FILTER = struct.Struct("=HBBI")
BPF_MAX_JUMP = 255  # jt and jf are u8
# <linux/seccomp.h>
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_MODE_FILTER = 2
# <linux/seccomp.h>: struct seccomp_data {int nr; __u32 arch; __u64 ip; __u64 args[6];}
SECCOMP_DATA_NR = 0
SECCOMP_DATA_ARCH = 4
SECCOMP_DATA_ARGS = 16
# <linux/audit.h>: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
AUDIT_ARCH_X86_64 = 0xC000003E
# <asm/unistd_64.h>: x32 syscalls report the x86_64 arch and set this bit in nr
X32_SYSCALL_BIT = 0x40000000
# <asm-generic/ioctls.h>: inject input into / control a terminal
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
# <linux/sched.h>
CLONE_THREAD = 0x00010000

# arch/x86/entry/syscalls/syscall_64.tbl
SYSCALLS_X86_64 = {
    "open": 2, "close": 3, "rt_sigaction": 13, "ioctl": 16, "dup2": 33, "alarm": 37,
    "setitimer": 38, "dup3": 292, "close_range": 436,
    "socket": 41, "connect": 42, "accept": 43, "sendto": 44,
    "recvfrom": 45, "sendmsg": 46, "recvmsg": 47, "bind": 49, "listen": 50, "socketpair": 53,
    "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62, "truncate": 76,
    "rename": 82, "mkdir": 83, "rmdir": 84, "creat": 85, "link": 86, "unlink": 87,
    "symlink": 88, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94,
    "ptrace": 101, "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114,
    "setgroups": 116, "setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123,
    "rt_sigqueueinfo": 129, "sigaltstack": 131, "mknod": 133, "setpriority": 141,
    "sched_setparam": 142, "sched_setscheduler": 144, "pivot_root": 155, "adjtimex": 159,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165,
    "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "tkill": 200, "sched_setaffinity": 203,
    "timer_create": 222, "timer_settime": 223, "clock_settime": 227, "tgkill": 234,
    "mbind": 237, "set_mempolicy": 238, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "migrate_pages": 256, "openat": 257,
    "mkdirat": 258, "mknodat": 259, "fchownat": 260, "unlinkat": 263, "renameat": 264,
    "linkat": 265, "symlinkat": 266, "fchmodat": 268, "unshare": 272, "move_pages": 279,
    "signalfd": 282, "timerfd_create": 283, "timerfd_settime": 286, "accept4": 288,
    "signalfd4": 289, "rt_tgsigqueueinfo": 297, "perf_event_open": 298, "recvmmsg": 299,
    "prlimit64": 302, "open_by_handle_at": 304, "clock_adjtime": 305, "sendmmsg": 307,
    "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313,
    "sched_setattr": 314, "renameat2": 316, "memfd_create": 319,
    "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "pidfd_send_signal": 424, "io_uring_setup": 425, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
    "openat2": 437, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "memfd_secret": 447, "set_mempolicy_home_node": 450, "fchmodat2": 452,
}  # fmt: skip

SYS_SECCOMP = 317

# --- what each profile refuses ---------------------------------------------------------------

ALWAYS_DENIED = (
    # network: sockets cannot be created, and existing ones cannot be connected or used
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal", "pidfd_getfd",
    "process_madvise",
    # namespaces, mounts, the machine and its clock
    "mount", "umount2", "unshare", "setns", "chroot", "pivot_root", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "acct", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex",
    # identity
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid",
    # kernel attack surface no step has a use for
    "memfd_create", "memfd_secret", "io_uring_setup", "bpf", "perf_event_open", "userfaultfd",
    "add_key", "request_key", "keyctl", "open_by_handle_at",
    # signals whose target the filter cannot tie to this process (tgkill can, below)
    "tkill",
)  # fmt: skip
NEW_PROGRAMS = ("execve", "execveat")
NEW_PROCESSES = ("fork", "vfork")
FILE_SYSTEM_CHANGES = (
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir",
    "link", "linkat", "symlink", "symlinkat", "mknod", "mknodat", "chmod", "fchmod",
    "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "truncate", "creat",
)  # fmt: skip
# rt_sigaction is refused only when it sets a handler (see _between_calls_rules).
BETWEEN_CALLS = (
    "sigaltstack", "alarm", "setitimer", "timer_create", "timer_settime", "timerfd_create",
    "timerfd_settime", "signalfd", "signalfd4", "sched_setaffinity", "sched_setscheduler",
    "sched_setparam", "sched_setattr", "setpriority", "set_mempolicy",
    "set_mempolicy_home_node", "mbind", "migrate_pages", "move_pages",
)  # fmt: skip
SIGNALS = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")

# The filter cannot read the flags these take through a struct; glibc falls back on ENOSYS
# (clone3 -> clone, openat2 is not used by glibc's open).
DENIED_WITH_ENOSYS = ("clone3", "openat2")

# Opening an existing file for reading is fine; anything that can write or create is not.
WRITE_OPEN_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def denied(profile: Profile) -> tuple[str, ...]:
    """The calls this profile refuses outright, whatever their arguments."""
    names = list(ALWAYS_DENIED)
    names += [] if profile.programs else NEW_PROGRAMS
    names += [] if profile.processes else NEW_PROCESSES
    names += [] if profile.file_writes else FILE_SYSTEM_CHANGES
    names += [] if profile.between_calls else BETWEEN_CALLS
    return tuple(names)


# --- the program ------------------------------------------------------------------------------


class _FilterBuilder:
    """Emits classic BPF; jumps name labels, resolved to offsets in build()."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | None, str | None, int]] = []
        self._labels: dict[str, int] = {}

    def load_word(self, offset: int) -> None:
        self._code.append((BPF_LD | BPF_W | BPF_ABS, None, None, offset))

    def load_arg(self, index: int, *, high: bool = False) -> None:
        """The low 32 bits of args[index] (what the kernel reads for int and flag arguments),
        or with `high` its high 32 bits (little-endian)."""
        self.load_word(SECCOMP_DATA_ARGS + 8 * index + (4 if high else 0))

    def jump(
        self, op: int, k: int, if_true: str | None = None, if_false: str | None = None
    ) -> None:
        """Compare the accumulator with k; a label that is None means the next instruction."""
        self._code.append((BPF_JMP | op | BPF_K, if_true, if_false, k))

    def ret(self, action: int) -> None:
        self._code.append((BPF_RET | BPF_K, None, None, action))

    def refuse_if(self, number: int, action: int) -> None:
        """Refuse one call by number, the return right after: no long jump however many."""
        self._code.append((BPF_JMP | BPF_JEQ | BPF_K, None, "+1", number))
        self.ret(action)

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def build(self) -> bytes:
        return b"".join(
            SOCK_FILTER.pack(code, self._offset(at, jt), self._offset(at, jf), k)
            for at, (code, jt, jf, k) in enumerate(self._code)
        )

    def _offset(self, at: int, label: str | None) -> int:
        if label is None:
            return 0
        if label.startswith("+"):
            return int(label[1:])
        offset = self._labels[label] - (at + 1)
        if not 0 <= offset <= BPF_MAX_JUMP:
            raise ValueError(f"seccomp filter: jump to {label!r} out of range ({offset})")
        return offset


EPERM = SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = SECCOMP_RET_ERRNO | errno.ENOSYS


def build_filter(profile: Profile, own_pid: int, protected_fds: tuple[int, ...] = ()) -> bytes:
    """The filter as packed `struct sock_filter`s. Unless the profile may signal others,
    signals may only go to process own_pid.

    `protected_fds` can be neither closed nor replaced (dup2/dup3 onto them, close_range):
    the harness reports to the judge through them, and a kernel must not redirect that.
    """
    f = _FilterBuilder()
    f.load_word(SECCOMP_DATA_ARCH)
    f.jump(BPF_JEQ, AUDIT_ARCH_X86_64, if_true="+1")
    f.ret(SECCOMP_RET_KILL_PROCESS)
    f.load_word(SECCOMP_DATA_NR)
    f.jump(BPF_JGE, X32_SYSCALL_BIT, if_false="+1")
    f.ret(ENOSYS)
    for name in denied(profile):
        f.refuse_if(SYSCALLS_X86_64[name], EPERM)
    for name in DENIED_WITH_ENOSYS:
        f.refuse_if(SYSCALLS_X86_64[name], ENOSYS)
    rules = _argument_rules(profile, protected_fds)
    for name, label in rules.items():
        f.jump(BPF_JEQ, SYSCALLS_X86_64[name], if_true=label)
    f.ret(SECCOMP_RET_ALLOW)
    _emit_argument_checks(f, set(rules.values()), own_pid, protected_fds)
    f.label("allow")
    f.ret(SECCOMP_RET_ALLOW)
    f.label("eperm")
    f.ret(EPERM)
    return f.build()


def _argument_rules(profile: Profile, protected_fds: tuple[int, ...]) -> dict[str, str]:
    """Calls decided by their arguments: name -> the label of the check."""
    rules = {"ioctl": "ioctl", "prlimit64": "first_arg_is_self_or_0"}
    if not profile.processes:
        rules["clone"] = "clone_thread" if profile.threads else "eperm"
    if not profile.file_writes:
        rules |= {"open": "open", "openat": "openat"}
    if not profile.between_calls:
        rules["rt_sigaction"] = "no_new_handler"
    if not profile.signal_others:
        rules |= dict.fromkeys(SIGNALS, "first_arg_is_self")
    if protected_fds:
        rules |= {"close_range": "eperm", "close": "first_arg_protected",
                  "dup2": "second_arg_protected", "dup3": "second_arg_protected"}  # fmt: skip
    return rules


def _emit_argument_checks(
    f: _FilterBuilder, used: set[str], own_pid: int, protected_fds: tuple[int, ...]
) -> None:
    if "first_arg_protected" in used:
        for label, index in (("first_arg_protected", 0), ("second_arg_protected", 1)):
            f.label(label)
            f.load_arg(index)
            for fd in protected_fds:
                f.jump(BPF_JEQ, fd, if_true="eperm")
            f.ret(SECCOMP_RET_ALLOW)
    if "clone_thread" in used:
        f.label("clone_thread")  # a thread (CLONE_THREAD implies CLONE_VM), never a process
        f.load_arg(0)
        f.jump(BPF_JSET, CLONE_THREAD, if_true="allow", if_false="eperm")
    if "open" in used:
        for label, flags_arg in (("open", 1), ("openat", 2)):
            f.label(label)
            f.load_arg(flags_arg)
            f.jump(BPF_JSET, WRITE_OPEN_FLAGS, if_true="eperm", if_false="allow")
    if "no_new_handler" in used:
        f.label("no_new_handler")  # rt_sigaction(sig, NULL, &old) only reads: allowed
        f.load_arg(1)
        f.jump(BPF_JEQ, 0, if_false="eperm")
        f.load_arg(1, high=True)
        f.jump(BPF_JEQ, 0, if_true="allow", if_false="eperm")
    f.label("ioctl")
    f.load_arg(1)
    f.jump(BPF_JEQ, TIOCSTI, if_true="eperm")
    f.jump(BPF_JEQ, TIOCLINUX, if_true="eperm", if_false="allow")
    f.label("first_arg_is_self_or_0")  # prlimit64(0, ...) means this process
    f.load_arg(0)
    f.jump(BPF_JEQ, 0, if_true="allow")
    f.label("first_arg_is_self")  # same-uid processes (the non-root fallback) stay untouched
    f.load_arg(0)
    f.jump(BPF_JEQ, own_pid, if_true="allow", if_false="eperm")


# --- loading ----------------------------------------------------------------------------------


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_LIBC = ctypes.CDLL(None, use_errno=True)


def install(profile: Profile, protected_fds: tuple[int, ...] = ()) -> None:
    """Install the profile's filter on the calling process (and its threads). Irreversible."""
    program = build_filter(profile, os.getpid(), protected_fds)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // SOCK_FILTER.size, ctypes.addressof(buffer))
    prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    if not _seccomp_on_all_threads(fprog):
        _require_single_thread()
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, "PR_SET_SECCOMP", ctypes.byref(fprog))


def _seccomp_on_all_threads(fprog: _SockFprog) -> bool:
    """seccomp(2) with TSYNC, so threads torch/OpenMP started already get the filter too.
    False when this kernel lacks it."""
    result = int(
        _LIBC.syscall(
            ctypes.c_long(SYS_SECCOMP),
            ctypes.c_long(SECCOMP_SET_MODE_FILTER),
            ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC),
            ctypes.byref(fprog),
        )
    )
    if result == 0:
        return True
    if result > 0:  # TSYNC answers with the id of a thread it could not synchronise
        raise OSError(f"seccomp: thread {result} could not take the filter")
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(code, f"seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): {os.strerror(code)}")


def _require_single_thread(grace_s: float = 0.5) -> None:
    """Python's join() returns before the kernel has reaped the thread, so a thread just
    joined may still be listed for a moment: wait that out before calling it an escape."""
    deadline = time.monotonic() + grace_s
    while (threads := len(os.listdir("/proc/self/task"))) > 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    if threads > 1:
        raise OSError(f"seccomp: no TSYNC on this kernel and {threads} threads would escape")
