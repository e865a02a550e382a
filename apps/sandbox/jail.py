"""The confinement every sandboxed process starts in: limits, a network of its own, an
unprivileged uid, its work dir, the files it may use (Landlock), a launch filter (seccomp) and
a SIGKILL when the process that started it dies. Standard library only (the reference
runner and the harness import it before anything else).

`confine_child` runs in the forked child before exec (`Popen(preexec_fn=...)`) or, for a
child that is forked and not executed (the warm reference runner's), right after the fork.
Which limits, files and filter each step gets is decided in apps/sandbox/policies.py, the
one place that starts a confined process.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pwd
import resource
from dataclasses import dataclass, fields

from apps.core.parent_death import die_with_parent
from apps.sandbox import seccomp
from apps.sandbox.landlock import Files, restrict_files

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


# <linux/sched.h>
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000

_LIBC = ctypes.CDLL(None, use_errno=True)


def confine_child(
    limits: Limits,
    workdir: str,
    files: Files | None = None,
    launch_filter: seccomp.Profile | None = None,
    *,
    parent: int | None = None,
) -> None:
    """Confine the calling process, a child forked a moment ago.

    Start it in a session of its own (Popen's start_new_session=True, or os.setsid()), so
    its process group can be killed as one. Raises OSError when a limit cannot be set, or when
    `files` is given and the child could read more than it names: a caller that is not root
    needs Landlock for that (root switches the child to SANDBOX_USER, and uses Landlock too
    where there is one). A host without any namespace support is not an error (the filters
    refuse socket creation). `parent`: the pid of the process that forked this one, when the
    caller knows it (taken before the fork); else the parent as this process first sees it.
    """
    was_root = os.geteuid() == 0
    parent = os.getppid() if parent is None else parent
    try:
        _apply_limits(limits)
        _isolate_network_and_drop_root()
        os.chdir(workdir)
        if files is not None:
            restrict_files(workdir, files, required=not was_root)
        die_with_parent(parent)  # after the uid change, which would clear it
        if launch_filter is not None:
            seccomp.install(launch_filter)  # it lets a process set its own limits
        _limit_memory_and_descriptors(limits)
    except Exception as error:
        # The parent only sees "Exception occurred in preexec_fn", so say why on stderr too.
        os.write(2, f"{type(error).__name__}: {error}\n".encode())
        raise


def _limit_memory_and_descriptors(limits: Limits) -> None:
    """Last, as nothing after them allocates or opens: this forked copy of its parent may
    already map more than the memory limit (a worker with torch loaded), so any allocation
    after it fails, and the steps above open descriptors a parent holding more than the
    limit (inherited until Popen closes them, after this) would leave no number for."""
    _set_limit("RLIMIT_NOFILE", limits.open_files, limits.open_files)
    _set_limit("RLIMIT_AS", limits.memory_mb * MB, limits.memory_mb * MB)


def _apply_limits(limits: Limits) -> None:
    for name, soft, hard in [
        ("RLIMIT_CPU", limits.cpu_s, limits.cpu_s + CPU_GRACE_S),
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
