"""Which Python the confined candidate process runs, so the unprivileged sandbox user can.

A virtual environment's interpreter often lives under a home directory the sandbox user
cannot enter (pyenv under /root, say). Then a system interpreter of the same version runs
the harness instead, with this environment's site-packages on its path: compiled packages
(numpy, torch) only need the same CPython version.
"""

from __future__ import annotations

import functools
import os
import shutil
import site
import stat
import sys
from pathlib import Path

SYSTEM_BIN_DIRS = ("/usr/local/bin", "/usr/bin", "/bin")


def reachable_by_others(path: Path, *, executable: bool = False) -> bool:
    """Whether a user who owns nothing here can read (and execute) `path`."""
    try:
        resolved = path.resolve()
        for parent in reversed(resolved.parents):
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
        mode = resolved.stat().st_mode
    except OSError:
        return False
    needed = stat.S_IROTH | (stat.S_IXOTH if executable else 0)
    return mode & needed == needed


@functools.cache
def sandbox_python() -> tuple[str, list[str]]:
    """(interpreter, extra sys.path entries) the sandbox user can run; as root only."""
    if os.geteuid() != 0 or _usable(Path(sys.executable), Path(os.__file__)):
        return sys.executable, []
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in SYSTEM_BIN_DIRS:
        candidate = shutil.which(version, path=folder)
        if candidate and reachable_by_others(Path(candidate), executable=True):
            return candidate, [p for p in site.getsitepackages() if reachable_by_others(Path(p))]
    raise RuntimeError(
        f"no {version} the sandbox user can run: {sys.executable} is not reachable by other "
        f"users and {', '.join(SYSTEM_BIN_DIRS)} hold no {version}; install one (apt-get install "
        f"{version}) or place the virtual environment where other users can read it"
    )


def _usable(interpreter: Path, stdlib_module: Path) -> bool:
    return reachable_by_others(interpreter, executable=True) and reachable_by_others(stdlib_module)
