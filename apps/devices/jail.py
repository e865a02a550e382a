"""Confinement for the process that runs untrusted compiled kernels. Standard library only
(and apps.core.parent_death, which is too).

Two steps, at two moments:

* `confine_child` runs in the forked child before exec (`Popen(preexec_fn=...)`): resource
  limits, a fresh network namespace, an unprivileged uid, the work dir and, when the caller
  names what the child may read (`Files`), a Landlock domain: the work dir and those paths,
  nothing else, whoever owns the rest (a worker that is not root cannot hand the child
  another uid, so file modes alone would let it read everything the worker can); and a
  SIGKILL from the kernel when the worker that started it dies.
* `install_seccomp` is called by the harness itself once it has imported what it needs,
  opened its files and loaded the kernel's dependencies, and before the first kernel call:
  a seccomp-BPF deny-list (no sockets, processes, exec, writes through new opens, mounts, ...).

Linux x86_64 only. The filter is a deny-list on top of the other layers (the symbol allowlist
of the .so, limits, network namespace, uid), not a complete allowlist.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import pwd
import resource
import stat
import struct
import time
from dataclasses import dataclass, fields

from apps.core.parent_death import die_with_parent

SANDBOX_USER = "nobody"
CPU_GRACE_S = 5  # between SIGXCPU at the soft limit and SIGKILL at the hard one
MB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 60  # RLIMIT_CPU soft (hard = soft + CPU_GRACE_S)
    memory_mb: int = 4096  # RLIMIT_AS
    open_files: int = 256  # RLIMIT_NOFILE
    processes: int = 256  # RLIMIT_NPROC: threads count too; only meaningful with a dedicated uid
    file_size_mb: int = 1024  # RLIMIT_FSIZE
    # core dumps are always off (RLIMIT_CORE 0)

    def __post_init__(self) -> None:
        for field in fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"Limits.{field.name} must be positive")


# --- confine_child ------------------------------------------------------------------------

# <linux/sched.h>
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_THREAD = 0x00010000

_LIBC = ctypes.CDLL(None, use_errno=True)


def confine_child(limits: Limits, workdir: str, files: Files | None = None) -> None:
    """For subprocess.Popen(preexec_fn=...): runs in the forked child before exec.

    Pass start_new_session=True to Popen as well, so the child has its own session and
    process group. Raises OSError when a limit cannot be set, or when `files` is given and the
    child could read more than it names: a caller that is not root needs Landlock for that
    (root switches the child to SANDBOX_USER, and uses Landlock too where there is one). A
    host without any namespace support is not an error (install_seccomp still refuses socket
    creation).
    """
    was_root = os.geteuid() == 0
    parent = os.getppid()  # as the child first sees it, an instant after the fork
    try:
        _apply_limits(limits)
        _isolate_network_and_drop_root()
        os.chdir(workdir)
        if files is not None:
            restrict_files(workdir, files, required=not was_root)
        die_with_parent(parent)  # last: the uid change above would clear it
    except OSError as error:
        # The parent only sees "Exception occurred in preexec_fn", so say why on stderr too.
        os.write(2, f"{error}\n".encode())
        raise


def _apply_limits(limits: Limits) -> None:
    for name, soft, hard in [
        ("RLIMIT_CPU", limits.cpu_s, limits.cpu_s + CPU_GRACE_S),
        ("RLIMIT_AS", limits.memory_mb * MB, limits.memory_mb * MB),
        ("RLIMIT_NOFILE", limits.open_files, limits.open_files),
        ("RLIMIT_NPROC", limits.processes, limits.processes),
        ("RLIMIT_FSIZE", limits.file_size_mb * MB, limits.file_size_mb * MB),
        ("RLIMIT_CORE", 0, 0),
    ]:
        _set_limit(name, soft, hard)


def _set_limit(name: str, soft: int, hard: int) -> None:
    which = getattr(resource, name)
    current_hard = resource.getrlimit(which)[1]
    if current_hard != resource.RLIM_INFINITY:
        # An existing lower hard limit is already stricter; raising it would need privileges.
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    try:
        resource.setrlimit(which, (soft, hard))
    except (OSError, ValueError) as error:  # Python reports EPERM/EINVAL as ValueError
        raise OSError(f"jail: cannot set {name} to soft={soft} hard={hard}: {error}") from error


def _isolate_network_and_drop_root() -> None:
    is_root = os.geteuid() == 0
    has_own_network = is_root and _try_unshare(CLONE_NEWNET)
    if is_root:
        _become_sandbox_user()
    if not has_own_network:
        # Unprivileged fallback (also for a root without CAP_SYS_ADMIN, e.g. in a container).
        _try_unshare(CLONE_NEWUSER | CLONE_NEWNET)


def _try_unshare(flags: int) -> bool:
    return int(_LIBC.unshare(ctypes.c_int(flags))) == 0


@functools.lru_cache(maxsize=1)
def sandbox_ids() -> tuple[int, int]:
    """(uid, gid) of SANDBOX_USER. Call it in the parent first: the cache survives fork, and
    an NSS lookup in the child of a multithreaded parent can deadlock."""
    entry = pwd.getpwnam(SANDBOX_USER)
    return entry.pw_uid, entry.pw_gid


def _become_sandbox_user() -> None:
    uid, gid = sandbox_ids()
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if 0 in (os.getuid(), os.geteuid(), os.getgid(), os.getegid()):
        raise OSError(f"jail: still privileged after switching to {SANDBOX_USER}")


# --- confine_child: Landlock, what the child may open ------------------------------------------


@dataclass(frozen=True)
class Files:
    """Paths the confined child may use besides its work dir (which it may change at will).

    `readable`: files beneath may be read and executed, folders listed. `listable`: folders
    beneath may be listed, no file read (Python lists each folder on its path). `writable`:
    anything, as in the work dir. A path that does not exist, or that the child cannot reach
    anyway, is left out.
    """

    readable: tuple[str, ...] = ()
    listable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()


# <asm/unistd_64.h>
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
# <linux/landlock.h>
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_TRUNCATE = 1 << 14  # ABI 3
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE  # for a non-folder
# What the domain controls, by ABI: 1 knows bits 0-12 (read, write, execute, list, make and
# remove of every kind), 2 adds 13 (REFER: rename or link across folders), 3 adds TRUNCATE.
# Later rights (device ioctls, TCP ports, scopes) are left alone: seccomp covers sockets.
FS_HANDLED = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1}
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# struct landlock_path_beneath_attr {__u64 allowed_access; __s32 parent_fd;} __packed
PATH_BENEATH = struct.Struct("=Qi")


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The Landlock ABI version of this kernel; 0 when there is none (before Linux 5.13, not
    in the `lsm=` list, or the syscalls refused, as by an old container seccomp profile)."""
    try:
        return _landlock_fd(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    except OSError:
        return 0


def restrict_files(workdir: str, files: Files, *, required: bool) -> None:
    """Put this process (and what it execs) in a Landlock domain: everything in `workdir`,
    `files`, and no other file. Without Landlock, an OSError when `required`, else nothing."""
    abi = min(landlock_abi(), max(FS_HANDLED))
    if abi == 0:
        if required:
            raise OSError(
                "jail: this kernel has no Landlock (Linux 5.13+, lsm=landlock), and a caller "
                "that is not root has no other way to keep the child from its files"
            )
        return
    handled = FS_HANDLED[abi]
    ruleset = _landlock_fd(
        SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(ctypes.c_uint64(handled)), 8, 0
    )
    try:
        _allow(ruleset, workdir, handled, required=True)
        for path in files.readable:
            _allow(ruleset, path, FS_READ)
        for path in files.listable:
            _allow(ruleset, path, FS_READ_DIR)
        for path in files.writable:
            _allow(ruleset, path, handled)
        _prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
        _landlock_fd(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, access: int, *, required: bool = False) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        if required:
            raise
        return  # missing, or out of this user's reach already
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FS_FILE_RIGHTS
        rule = ctypes.create_string_buffer(PATH_BENEATH.pack(access, fd), PATH_BENEATH.size)
        _landlock_fd(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, 0)
    finally:
        os.close(fd)


def _landlock_fd(number: int, *args: object) -> int:
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = int(_LIBC.syscall(ctypes.c_long(number), *converted))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"jail: Landlock syscall {number}: {os.strerror(code)}")
    return result


# --- install_seccomp: constants -------------------------------------------------------------

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
# <linux/prctl.h>
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
# <linux/audit.h>: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
AUDIT_ARCH_X86_64 = 0xC000003E
# <asm/unistd_64.h>: x32 syscalls report the x86_64 arch and set this bit in nr
X32_SYSCALL_BIT = 0x40000000
# <asm-generic/ioctls.h>: inject input into / control a terminal
TIOCSTI = 0x5412
TIOCLINUX = 0x541C

# arch/x86/entry/syscalls/syscall_64.tbl
SYSCALLS_X86_64 = {
    "open": 2, "close": 3, "ioctl": 16, "dup2": 33, "dup3": 292, "close_range": 436,
    "socket": 41, "connect": 42, "accept": 43, "sendto": 44,
    "recvfrom": 45, "sendmsg": 46, "recvmsg": 47, "bind": 49, "listen": 50, "socketpair": 53,
    "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62, "truncate": 76,
    "rename": 82, "mkdir": 83, "rmdir": 84, "creat": 85, "link": 86, "unlink": 87,
    "symlink": 88, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94,
    "ptrace": 101, "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114,
    "setgroups": 116, "setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123,
    "rt_sigqueueinfo": 129, "mknod": 133, "pivot_root": 155, "chroot": 161, "mount": 165,
    "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "init_module": 175,
    "delete_module": 176, "tkill": 200, "tgkill": 234, "kexec_load": 246, "openat": 257,
    "mkdirat": 258, "mknodat": 259, "fchownat": 260, "unlinkat": 263, "renameat": 264,
    "linkat": 265, "symlinkat": 266, "fchmodat": 268, "unshare": 272, "accept4": 288,
    "rt_tgsigqueueinfo": 297, "perf_event_open": 298, "recvmmsg": 299, "prlimit64": 302,
    "open_by_handle_at": 304, "sendmmsg": 307, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "renameat2": 316, "memfd_create": 319,
    "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "pidfd_send_signal": 424, "io_uring_setup": 425, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
    "openat2": 437, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "fchmodat2": 452,
}  # fmt: skip

SYS_SECCOMP = 317

DENIED_WITH_EPERM = (
    # network: sockets cannot be created, and existing ones cannot be connected or used
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
    # new processes and programs (threads are allowed through the clone rule)
    "fork", "vfork", "execve", "execveat",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal", "pidfd_getfd",
    "process_madvise",
    # namespaces, mounts, the machine
    "mount", "umount2", "unshare", "setns", "chroot", "pivot_root", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff",
    # identity
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid",
    # changes to the file system (file contents are covered by the open rules)
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir",
    "link", "linkat", "symlink", "symlinkat", "mknod", "mknodat", "chmod", "fchmod",
    "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "truncate", "creat",
    "open_by_handle_at",
    # kernel attack surface a kernel benchmark has no use for
    "memfd_create", "io_uring_setup", "bpf", "perf_event_open", "userfaultfd",
    # signals whose target the filter cannot tie to this process (tgkill can, below)
    "tkill",
)  # fmt: skip

# The filter cannot read the flags these take through a struct; glibc falls back on ENOSYS
# (clone3 -> clone, openat2 is not used by glibc's open).
DENIED_WITH_ENOSYS = ("clone3", "openat2")

# Opening an existing file for reading is fine; anything that can write or create is not.
WRITE_OPEN_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


# --- install_seccomp: the program -----------------------------------------------------------


class _FilterBuilder:
    """Emits classic BPF; jumps name labels, resolved to offsets in build()."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | None, str | None, int]] = []
        self._labels: dict[str, int] = {}

    def load_word(self, offset: int) -> None:
        self._code.append((BPF_LD | BPF_W | BPF_ABS, None, None, offset))

    def load_arg(self, index: int) -> None:
        """The low 32 bits of args[index]: what the kernel reads for int and flag arguments."""
        self.load_word(SECCOMP_DATA_ARGS + 8 * index)

    def jump(
        self, op: int, k: int, if_true: str | None = None, if_false: str | None = None
    ) -> None:
        """Compare the accumulator with k; a label that is None means the next instruction."""
        self._code.append((BPF_JMP | op | BPF_K, if_true, if_false, k))

    def ret(self, action: int) -> None:
        self._code.append((BPF_RET | BPF_K, None, None, action))

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
        offset = self._labels[label] - (at + 1)
        if not 0 <= offset <= BPF_MAX_JUMP:
            raise ValueError(f"seccomp filter: jump to {label!r} out of range ({offset})")
        return offset


def build_seccomp_filter(own_pid: int, protected_fds: tuple[int, ...] = ()) -> bytes:
    """The filter as packed `struct sock_filter`s; signals may only go to process own_pid.

    `protected_fds` can be neither closed nor replaced (dup2/dup3 onto them, close_range):
    the harness reports to the judge through them, and a kernel must not redirect that.
    """
    f = _FilterBuilder()
    f.load_word(SECCOMP_DATA_ARCH)
    f.jump(BPF_JEQ, AUDIT_ARCH_X86_64, if_false="kill")
    f.load_word(SECCOMP_DATA_NR)
    f.jump(BPF_JGE, X32_SYSCALL_BIT, if_true="enosys")
    for name in DENIED_WITH_EPERM:
        f.jump(BPF_JEQ, SYSCALLS_X86_64[name], if_true="eperm")
    for name in DENIED_WITH_ENOSYS:
        f.jump(BPF_JEQ, SYSCALLS_X86_64[name], if_true="enosys")
    argument_rules = {
        "clone": "clone", "open": "open", "openat": "openat", "ioctl": "ioctl",
        "kill": "first_arg_is_self", "tgkill": "first_arg_is_self",
        "rt_sigqueueinfo": "first_arg_is_self", "rt_tgsigqueueinfo": "first_arg_is_self",
        "prlimit64": "first_arg_is_self_or_0",
    }  # fmt: skip
    for name, label in argument_rules.items():
        f.jump(BPF_JEQ, SYSCALLS_X86_64[name], if_true=label)
    if protected_fds:
        f.jump(BPF_JEQ, SYSCALLS_X86_64["close_range"], if_true="eperm")
        f.jump(BPF_JEQ, SYSCALLS_X86_64["close"], if_true="first_arg_protected")
        f.jump(BPF_JEQ, SYSCALLS_X86_64["dup2"], if_true="second_arg_protected")
        f.jump(BPF_JEQ, SYSCALLS_X86_64["dup3"], if_true="second_arg_protected")
    f.ret(SECCOMP_RET_ALLOW)

    if protected_fds:
        f.label("first_arg_protected")
        f.load_arg(0)
        for fd in protected_fds:
            f.jump(BPF_JEQ, fd, if_true="eperm")
        f.ret(SECCOMP_RET_ALLOW)
        f.label("second_arg_protected")
        f.load_arg(1)
        for fd in protected_fds:
            f.jump(BPF_JEQ, fd, if_true="eperm")
        f.ret(SECCOMP_RET_ALLOW)

    f.label("clone")  # a thread (CLONE_THREAD implies CLONE_VM), never a new process
    f.load_arg(0)
    f.jump(BPF_JSET, CLONE_THREAD, if_true="allow", if_false="eperm")
    f.label("open")
    f.load_arg(1)
    f.jump(BPF_JSET, WRITE_OPEN_FLAGS, if_true="eperm", if_false="allow")
    f.label("openat")
    f.load_arg(2)
    f.jump(BPF_JSET, WRITE_OPEN_FLAGS, if_true="eperm", if_false="allow")
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

    f.label("allow")
    f.ret(SECCOMP_RET_ALLOW)
    f.label("eperm")
    f.ret(SECCOMP_RET_ERRNO | errno.EPERM)
    f.label("enosys")
    f.ret(SECCOMP_RET_ERRNO | errno.ENOSYS)
    f.label("kill")
    f.ret(SECCOMP_RET_KILL_PROCESS)
    return f.build()


# --- install_seccomp: loading ---------------------------------------------------------------


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(protected_fds: tuple[int, ...] = ()) -> None:
    """Install a seccomp-BPF filter on the calling process (and its threads). Irreversible."""
    program = build_seccomp_filter(os.getpid(), protected_fds)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // SOCK_FILTER.size, ctypes.addressof(buffer))
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    if not _seccomp_on_all_threads(fprog):
        _require_single_thread()
        _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, "PR_SET_SECCOMP", ctypes.byref(fprog))


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


def _prctl(option: int, value: int, name: str, pointer: object = None) -> None:
    if int(_LIBC.prctl(option, ctypes.c_ulong(value), pointer, None, None)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl({name}): {os.strerror(code)}")
