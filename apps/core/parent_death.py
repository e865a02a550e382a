"""Children that must not outlive the process that started them. Standard library only: the
sandbox's preexec_fn and the reference runner (which imports nothing of Django) use it.

A child started in a session of its own (the sandboxed kernel, a reference run, the
processes of `make run`) is out of reach of a signal sent to its parent's process group: a
SIGKILLed worker, or one the out-of-memory killer took, would leave it running."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a forked child: the kernel sends `sig` when `parent` (the pid of the process that
    forked it, best taken before the fork) ends. Raises OSError when it cannot be set, or when the
    parent ended first (it would never come). Strictly, it comes when the parent's *thread*
    ends: each caller waits for its child on the thread that started it. A change of uid
    clears it, so a child that drops privileges calls this after."""
    libc = ctypes.CDLL(None, use_errno=True)
    if int(libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_PDEATHSIG): {os.strerror(code)}")
    if os.getppid() != parent:
        raise OSError(f"the process that started this one ({parent}) has already ended")
