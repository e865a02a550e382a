"""Landlock: which files a confined process may read, execute and write. Standard library only.

A domain made here lasts for the process and everything it starts; nothing can widen it.
Whoever owns the files, the process reaches only its work dir and the paths it names: a
worker that is not root cannot hand its child another uid, so file modes alone would let it
read everything the worker can. On kernels with Landlock ABI 6 or later the domain is also
scoped: its processes can signal, and reach abstract unix sockets of, only their own domain.
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
import struct
from dataclasses import dataclass

from apps.sandbox.prctl import PR_SET_NO_NEW_PRIVS, prctl


@dataclass(frozen=True)
class Files:
    """Paths a confined process may use besides its work dir (where it may do anything).

    `readable`: files beneath may be read, folders listed; nothing executed.
    `executable`: as readable, and files beneath may be executed (a program, and the dynamic
    loader every program needs). `listable`: folders beneath may be listed, no file read
    (Python lists each folder on its path). `writable`: anything, as in the work dir. A path
    that does not exist, or that the process cannot reach anyway, is left out.
    """

    readable: tuple[str, ...] = ()
    executable: tuple[str, ...] = ()
    listable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()

    def every_path(self) -> tuple[str, ...]:
        return (*self.readable, *self.executable, *self.listable, *self.writable)


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
# Later file rights (device ioctls) and TCP ports are left alone: seccomp covers sockets.
FS_HANDLED = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1}
FS_READ = FS_READ_FILE | FS_READ_DIR
FS_READ_EXECUTE = FS_READ | FS_EXECUTE
# ABI 6: struct landlock_ruleset_attr gains `scoped` after handled_access_net.
SCOPE_ABI = 6
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1
# struct landlock_ruleset_attr {__u64 handled_access_fs, handled_access_net, scoped;}
RULESET_ATTR = struct.Struct("=QQQ")
# struct landlock_path_beneath_attr {__u64 allowed_access; __s32 parent_fd;} __packed
PATH_BENEATH = struct.Struct("=Qi")

_LIBC = ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The Landlock ABI version of this kernel; 0 when there is none (before Linux 5.13, not
    in the `lsm=` list, or the syscalls refused, as by an old container seccomp profile)."""
    try:
        return _landlock_fd(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    except OSError:
        return 0


def restrict_files(workdir: str, files: Files, *, required: bool) -> None:
    """Put this process (and what it starts) in a Landlock domain: everything in `workdir`,
    `files`, and no other file. Without Landlock, an OSError when `required`, else nothing."""
    abi = landlock_abi()
    if abi == 0:
        if required:
            raise OSError(
                "jail: this kernel has no Landlock (Linux 5.13+, lsm=landlock), and a caller "
                "that is not root has no other way to keep the child from its files"
            )
        return
    handled = FS_HANDLED[min(abi, max(FS_HANDLED))]
    ruleset = _new_ruleset(handled, abi)
    try:
        _allow(ruleset, workdir, handled, required=True)
        for paths, access in [
            (files.readable, FS_READ),
            (files.executable, FS_READ_EXECUTE),
            (files.listable, FS_READ_DIR),
            (files.writable, handled),
        ]:
            for path in paths:
                _allow(ruleset, path, access)
        prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
        _landlock_fd(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def _new_ruleset(handled: int, abi: int) -> int:
    scoped = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if abi >= SCOPE_ABI else 0
    attr = RULESET_ATTR.pack(handled, 0, scoped)
    size = RULESET_ATTR.size if scoped else 8  # older kernels know only the first field
    buffer = ctypes.create_string_buffer(attr, RULESET_ATTR.size)
    return _landlock_fd(SYS_LANDLOCK_CREATE_RULESET, buffer, size, 0)


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
