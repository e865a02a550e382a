"""Unpacking a suite archive uploaded to the Imports page (.zip, .tar.gz, .tgz), for the
importer to read as it reads a folder on the server.

Nothing in an archive is trusted: each entry is written by this module (never by zipfile's or
tarfile's extract), into a fresh folder that only this process's user can read, as a regular
file or a folder and nothing else. An absolute name, a `..`, a link, a device, two entries for
one path, more entries or more bytes than the limits allow (a zip bomb ends there) refuse the
whole archive with the reason; the caller removes what was unpacked so far.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from django.conf import settings

from apps.core.errors import DomainError

ARCHIVE_KINDS = {".zip": "zip", ".tar.gz": "tar", ".tgz": "tar"}
COPY_CHUNK = 1 << 16
UNREADABLE = (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, OSError, ValueError)


class ArchiveRefused(DomainError):
    code = "archive_refused"


@dataclass(frozen=True)
class Limits:
    archive_bytes: int
    unpacked_bytes: int
    entries: int  # files and folders

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(archive_bytes=settings.KOPE_IMPORT_MAX_ARCHIVE_BYTES,
                   unpacked_bytes=settings.KOPE_IMPORT_MAX_UNPACKED_BYTES,
                   entries=settings.KOPE_IMPORT_MAX_ARCHIVE_FILES)  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One member of the archive as this module sees it, whatever the format."""

    name: str
    kind: str  # "file", "folder", or what it is instead ("a symbolic link", "a device", ...)
    size: int
    open: Callable[[], IO[bytes] | None]


@dataclass
class Unpacking:
    """What the archive has unpacked so far, against its limits."""

    into: Path
    limits: Limits
    entries: int = 0
    written: int = 0
    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)


def archive_kind(filename: str) -> str:
    lowered = filename.lower()
    for suffix, kind in ARCHIVE_KINDS.items():
        if lowered.endswith(suffix):
            return kind
    raise ArchiveRefused(f"{filename} is not a .zip, .tar.gz or .tgz archive")


def folder_name(filename: str) -> str:
    """The archive's name without its suffix, in safe characters: the folder it unpacks into,
    which names the import's suite (`level1.zip` gives the suite kernelbench-level1)."""
    stem = Path(filename).name
    for suffix in ARCHIVE_KINDS:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in stem)
    return safe.strip(".-")[:100] or "archive"


def check_size(filename: str, size: int | None, limits: Limits) -> None:
    if size is not None and size > limits.archive_bytes:
        raise ArchiveRefused(f"{filename} is {size} bytes; an archive may be at most "
                             f"{limits.archive_bytes} (KOPE_IMPORT_MAX_ARCHIVE_BYTES)")  # fmt: skip


def fresh_folder() -> Path:
    """A new folder of its own under KOPE_IMPORT_UPLOAD_DIR, readable by this user alone."""
    base = Path(settings.KOPE_IMPORT_UPLOAD_DIR)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Path(tempfile.mkdtemp(prefix="upload-", dir=base))


def upload_folder_of(path: str) -> Path | None:
    """The fresh folder an uploaded archive was unpacked into, for an import's path inside
    it; None for any other path (a folder on the server is never removed)."""
    base = Path(settings.KOPE_IMPORT_UPLOAD_DIR).resolve()
    resolved = Path(path).resolve()
    if resolved == base or not resolved.is_relative_to(base):
        return None
    return base / resolved.relative_to(base).parts[0]


def upload_folder_remove(path: str) -> None:
    folder = upload_folder_of(path)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def unpack(archive: IO[bytes], filename: str, into: Path, limits: Limits) -> None:
    """Write the archive's files under `into` (made here; it must not exist yet)."""
    kind = archive_kind(filename)
    into.mkdir(mode=0o700)
    state = Unpacking(into=into, limits=limits)
    try:
        for entry in zip_entries(archive) if kind == "zip" else tar_entries(archive):
            unpack_entry(entry, state)
    except UNREADABLE as error:
        raise ArchiveRefused(f"{filename} could not be unpacked: {error}") from None


def zip_entries(archive: IO[bytes]) -> Iterator[Entry]:
    with zipfile.ZipFile(archive) as opened:
        for info in opened.infolist():
            yield Entry(info.filename, zip_kind(info), info.file_size,
                        lambda info=info: opened.open(info))  # type: ignore[misc]  # fmt: skip


def zip_kind(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16  # the Unix mode, where a Unix tool made the archive
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "a device or other special file"
    return "folder" if info.is_dir() else "file"


def tar_entries(archive: IO[bytes]) -> Iterator[Entry]:
    with tarfile.open(fileobj=archive, mode="r:gz") as opened:
        for info in opened:  # one at a time: a million entries stop at the limit
            yield Entry(info.name, tar_kind(info), info.size,
                        lambda info=info: opened.extractfile(info))  # type: ignore[misc]  # fmt: skip


def tar_kind(info: tarfile.TarInfo) -> str:
    if info.isreg():
        return "file"
    if info.isdir():
        return "folder"
    if info.issym():
        return "a symbolic link"
    if info.islnk():
        return "a hard link"
    return "a device or other special file"


def unpack_entry(entry: Entry, state: Unpacking) -> None:
    state.entries += 1
    if state.entries > state.limits.entries:
        raise ArchiveRefused(f"the archive holds more than {state.limits.entries} files and "
                             "folders (KOPE_IMPORT_MAX_ARCHIVE_FILES)")  # fmt: skip
    if entry.kind not in ("file", "folder"):
        raise ArchiveRefused(f"{entry.name!r} is {entry.kind}; an archive may hold only "
                             "files and folders")  # fmt: skip
    parts = checked_parts(entry.name)
    if not parts:
        return  # "./": the archive's top folder itself
    claim_path(parts, entry, state)
    target = state.into.joinpath(*parts)
    if entry.kind == "folder":
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
    else:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_file(entry, target, state)


def checked_parts(name: str) -> list[str]:
    """The entry's path as folder names under the archive's top; ArchiveRefused for a name
    that could reach outside it or that no file can be given."""
    if "\x00" in name or not is_utf8(name):
        raise ArchiveRefused(f"{name!r}: the name is not UTF-8 text")
    if "\\" in name:
        raise ArchiveRefused(f"{name!r}: a backslash in a name is refused (a Windows path?)")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveRefused(f"{name!r}: an absolute path is refused")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveRefused(f"{name!r}: a '..' in a path is refused")
    return parts


def is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def claim_path(parts: list[str], entry: Entry, state: Unpacking) -> None:
    """Refuse an entry whose path another entry has already taken, as a file or, for a file,
    as a folder; or that lies inside a path that is a file."""
    path = "/".join(parts)
    for depth in range(1, len(parts)):
        above = "/".join(parts[:depth])
        if above in state.files:
            raise ArchiveRefused(f"{entry.name!r}: {above!r} is a file in the archive too")
    if path in state.files or (entry.kind == "file" and path in state.folders):
        raise ArchiveRefused(f"{entry.name!r}: the archive holds that path twice")
    for depth in range(1, len(parts)):
        state.folders.add("/".join(parts[:depth]))
    (state.files if entry.kind == "file" else state.folders).add(path)


def write_file(entry: Entry, target: Path, state: Unpacking) -> None:
    left = state.limits.unpacked_bytes - state.written
    if entry.size > left:
        raise too_many_bytes(state)
    source = entry.open()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(target, flags, 0o600), "wb") as copy:
        if source is None:
            return
        with source:
            while chunk := source.read(COPY_CHUNK):
                state.written += len(chunk)
                if state.written > state.limits.unpacked_bytes:  # a size the header understated
                    raise too_many_bytes(state)
                copy.write(chunk)


def too_many_bytes(state: Unpacking) -> ArchiveRefused:
    return ArchiveRefused(f"the archive unpacks to more than {state.limits.unpacked_bytes} "
                          "bytes (KOPE_IMPORT_MAX_UNPACKED_BYTES)")  # fmt: skip
