"""prctl(2) for the sandbox's own settings. Standard library only."""

from __future__ import annotations

import ctypes
import os

# <linux/prctl.h>
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38

_LIBC = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int, name: str, pointer: object = None) -> None:
    """prctl(option, value, pointer); OSError naming `name` when the kernel refuses."""
    if int(_LIBC.prctl(option, ctypes.c_ulong(value), pointer, None, None)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl({name}): {os.strerror(code)}")
