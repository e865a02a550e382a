"""Work dirs that a dead process leaves behind, told apart from the ones a live process uses.

The process that makes a work dir claims it: an exclusive flock on a lock file inside it, held
for as long as the work lasts. The kernel lets go of a flock when the process holding it dies
(SIGKILL, the out-of-memory killer), so a folder whose lock can be taken has no owner left and
can go. Only the standard library: the sandbox's processes import it too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

LOCK_NAME = ".kope-claim"
# A folder with no lock file was made by a version before claims (or its maker died between
# making it and claiming it): taken for abandoned once nothing in it changed for this long,
# longer than an evaluation's every step together.
UNCLAIMED_AFTER_S = 3600.0

logger = logging.getLogger(__name__)

StrPath = str | os.PathLike[str]


class Claim:
    """A work dir's lock, held until `release()` (or the end of a `with` block). Remove the
    folder first, then release: the other way round, a sweep may take it meanwhile."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim(path: StrPath) -> Claim:
    """Lock the new work dir `path` for the life of the work. The lock file is made under a
    name of its own and locked before it is renamed into place, so a sweep never finds it
    unlocked; only this uid (and root) can open it."""
    folder = Path(path)
    staging = folder / f"{LOCK_NAME}.{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(staging, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(staging, folder / LOCK_NAME)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            staging.unlink()
        raise
    return Claim(folder, fd)


@contextlib.contextmanager
def temporary(prefix: str, base: StrPath | None = None) -> Iterator[Path]:
    """`tempfile.TemporaryDirectory`, claimed: made in `base` (the system temp folder by
    default), claimed, and at the end removed before its lock is let go."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        held = claim(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        held.release()


def remove_abandoned(bases: Iterable[StrPath], prefixes: Iterable[str]) -> list[Path]:
    """Remove each folder directly under `bases` whose name starts with one of `prefixes` and
    whose owner is dead; return them. A folder that a live process holds, a symlink, one whose
    lock file this uid did not make (another user's, or planted by the sandbox user) and one
    with no lock file that is young or another user's stay."""
    wanted = tuple(prefixes)
    removed: list[Path] = []
    for base in dict.fromkeys(Path(b) for b in bases):  # each base once, in order
        removed += remove_abandoned_in(base, wanted)
    return removed


def remove_abandoned_in(base: Path, prefixes: tuple[str, ...]) -> list[Path]:
    try:
        base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # gone, or not ours to read: nothing in it to remove
        return []
    try:
        names = [
            entry.name
            for entry in os.scandir(base_fd)
            if entry.name.startswith(prefixes) and entry.is_dir(follow_symlinks=False)
        ]
        return [base / name for name in sorted(names) if remove_if_abandoned(base_fd, name)]
    finally:
        os.close(base_fd)


def remove_if_abandoned(base_fd: int, name: str) -> bool:
    """Everything is opened relative to the base and without following a symlink: a folder
    swapped for a link meanwhile leads nowhere outside the base."""
    try:
        folder_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=base_fd)
    except OSError:
        return False
    try:
        lock_fd = open_lock(folder_fd)
    except FileNotFoundError:
        stale = made_here(folder_fd) and unchanged_for(folder_fd) > UNCLAIMED_AFTER_S
        os.close(folder_fd)
        return stale and removed(base_fd, name)
    except OSError:  # not a lock file this uid made: a symlink (ELOOP), another uid's (EACCES)
        os.close(folder_fd)
        return False
    os.close(folder_fd)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        return False  # its owner is alive
    try:  # held while removing: another sweep finds it taken and leaves it
        return removed(base_fd, name)
    finally:
        os.close(lock_fd)


def open_lock(folder_fd: int) -> int:
    """The folder's lock file, if it is one: a regular file this uid made. The folder may be
    the sandbox user's, who can put anything in its place (a FIFO would block the open, its own
    file would lend its folder to the sweep); raises OSError then."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(LOCK_NAME, flags, dir_fd=folder_fd)
    found = os.fstat(fd)
    if stat.S_ISREG(found.st_mode) and found.st_uid == os.geteuid():
        return fd
    os.close(fd)
    raise PermissionError(errno.EACCES, "not a lock file of this uid", LOCK_NAME)


def made_here(folder_fd: int) -> bool:
    """Whether this uid made the folder: another user's is not this sweep's to judge by age."""
    return os.fstat(folder_fd).st_uid == os.geteuid()


def unchanged_for(folder_fd: int) -> float:
    """Seconds since the folder or a folder directly in it last changed (a file made or
    removed there)."""
    newest = os.fstat(folder_fd).st_mtime
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder_fd):
            if entry.is_dir(follow_symlinks=False):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return time.time() - newest


def removed(base_fd: int, name: str) -> bool:
    try:
        shutil.rmtree(name, dir_fd=base_fd)
    except FileNotFoundError:
        return False  # another sweep removed it first
    except OSError as error:  # files of another uid in a folder this one cannot write
        logger.warning("cannot remove the abandoned work dir %s: %s", name, error)
        return False
    return True
