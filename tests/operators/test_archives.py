"""Uploaded suite archives: each way an archive could write outside its folder, or grow past
its limits, refuses the whole archive saying why, and leaves nothing behind; a sound one is
unpacked and imported by the same importer as a folder, its folder removed once it ends."""

from __future__ import annotations

import io
import random
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.operators.archives import ArchiveRefused, Limits, folder_name, unpack
from apps.operators.importing import ImportRequestError, import_execute, import_start_from_archive
from apps.operators.models import ImportRun, Suite
from tests.operators.conftest import SAMPLES

LIMITS = Limits(archive_bytes=1_000_000, unpacked_bytes=100_000, entries=20)
RELU = (SAMPLES / "kernelbench" / "level1" / "1_ReLU.py").read_bytes()


def zip_of(*members: tuple[str, bytes] | zipfile.ZipInfo, data: bytes = b"x") -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member in members:
            if isinstance(member, zipfile.ZipInfo):
                archive.writestr(member, data)
            else:
                archive.writestr(*member)
    buffer.seek(0)
    return buffer


def tar_of(*members: tarfile.TarInfo | tuple[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                archive.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                archive.addfile(info, io.BytesIO(member[1]))
    buffer.seek(0)
    return buffer


def tar_entry(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def zip_link(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def refusal(archive: io.BytesIO, filename: str, into: Path, limits: Limits = LIMITS) -> str:
    with pytest.raises(ArchiveRefused) as refused:
        unpack(archive, filename, into / "unpacked", limits)
    return refused.value.message


SYMLINK = tar_entry("link.py", tarfile.SYMTYPE, "/etc/passwd")
HARD_LINK = tar_entry("b.py", tarfile.LNKTYPE, "a.py")
REFUSED = [
    (zip_of(("/etc/cron.d/evil", b"x")), "a.zip", "'/etc/cron.d/evil': an absolute path is"),
    (tar_of(("/etc/evil", b"x")), "a.tgz", "'/etc/evil': an absolute path is refused"),
    (zip_of(("C:/evil.py", b"x")), "a.zip", "'C:/evil.py': an absolute path is refused"),
    (zip_of(("l1/../../evil.py", b"x")), "a.zip", "'l1/../../evil.py': a '..' in a path is"),
    (tar_of(("../evil.py", b"x")), "a.tar.gz", "'../evil.py': a '..' in a path is refused"),
    (zip_of(("l1\\..\\evil.py", b"x")), "a.zip", "a backslash in a name is refused"),
    (zip_of(zip_link("l1/link.py", "/etc/passwd")), "a.zip", "'l1/link.py' is a symbolic link;"),
    (tar_of(SYMLINK), "a.tgz", "'link.py' is a symbolic link; an archive may hold only files"),
    (tar_of(("a.py", b"x"), HARD_LINK), "a.tgz", "'b.py' is a hard link"),
    (tar_of(tar_entry("null", tarfile.CHRTYPE)), "a.tgz", "'null' is a device or other special"),
    (tar_of(tar_entry("pipe", tarfile.FIFOTYPE)), "a.tgz", "'pipe' is a device or other special"),
    (zip_of(("a.py", b"x"), ("a.py", b"y")), "a.zip", "'a.py': the archive holds that path twice"),
    (tar_of(("a.py", b"x"), ("./a.py", b"y")), "a.tgz", "'./a.py': the archive holds that path"),
    (zip_of(("l1", b"x"), ("l1/a.py", b"y")), "a.zip", "'l1/a.py': 'l1' is a file in the archive"),
    (zip_of(("l1/a.py", b"x"), ("l1", b"y")), "a.zip", "'l1': the archive holds that path twice"),
    (zip_of(("a.py", b"x")), "a.rar", "a.rar is not a .zip, .tar.gz or .tgz archive"),
    (io.BytesIO(b"not a zip"), "a.zip", "a.zip could not be unpacked: File is not a zip file"),
    (io.BytesIO(b"not gzip either"), "a.tgz", "a.tgz could not be unpacked: "),
]


@pytest.mark.parametrize(("archive", "filename", "reason"), REFUSED)
def test_an_archive_that_could_write_outside_its_folder_is_refused_saying_why(
    archive: io.BytesIO, filename: str, reason: str, tmp_path: Path
) -> None:
    assert reason in refusal(archive, filename, tmp_path)
    assert not (tmp_path / "etc").exists() and not (tmp_path / "evil.py").exists()
    assert not any(p.is_symlink() for p in tmp_path.rglob("*"))


def test_a_zip_bomb_stops_at_the_unpacked_limit(tmp_path: Path) -> None:
    bomb = zip_of(*((f"zeros{i}.py", bytes(60_000)) for i in range(3)))
    assert len(bomb.getvalue()) < 2_000  # it is small: only unpacking it would be large

    reason = refusal(bomb, "bomb.zip", tmp_path)

    assert (
        reason == "the archive unpacks to more than 100000 bytes (KOPE_IMPORT_MAX_UNPACKED_BYTES)"
    )
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) <= 100_000


def test_an_entry_whose_header_understates_its_size_stops_at_the_limit(tmp_path: Path) -> None:
    tiny = Limits(archive_bytes=1_000_000, unpacked_bytes=1_000, entries=20)
    reason = refusal(tar_of(("big.py", bytes(5_000))), "big.tgz", tmp_path, tiny)
    assert "unpacks to more than 1000 bytes" in reason


def test_an_archive_of_too_many_files_is_refused_at_the_limit(tmp_path: Path) -> None:
    many = tar_of(*((f"p{i}.py", b"x") for i in range(25)))
    reason = refusal(many, "many.tgz", tmp_path)
    assert (
        reason == "the archive holds more than 20 files and folders (KOPE_IMPORT_MAX_ARCHIVE_FILES)"
    )


def test_a_sound_archive_is_unpacked_as_regular_files_only_its_user_reads(tmp_path: Path) -> None:
    archive = tar_of(tar_entry("./", tarfile.DIRTYPE), ("./level1/1_ReLU.py", RELU))
    into = tmp_path / "unpacked"

    unpack(archive, "kb.tar.gz", into, LIMITS)

    written = into / "level1" / "1_ReLU.py"
    assert written.read_bytes() == RELU
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE(into.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    ("filename", "folder"),
    [("level1.zip", "level1"), ("KB.Level2.TAR.GZ", "KB.Level2"), ("../../x y.tgz", "x-y"),
     ("..zip", "archive")],
)  # fmt: skip
def test_the_unpacked_folder_is_named_after_the_archive_in_safe_characters(
    filename: str, folder: str
) -> None:
    assert folder_name(filename) == folder


@pytest.fixture
def upload_dir(settings: Any, tmp_path: Path) -> Path:
    settings.KOPE_IMPORT_UPLOAD_DIR = tmp_path / "uploads"
    settings.KOPE_IMPORT_MAX_ARCHIVE_BYTES = 5_000
    return tmp_path / "uploads"


def start_from(archive: io.BytesIO, name: str, team: Team) -> ImportRun:
    data = archive.getvalue()
    return import_start_from_archive(archive=io.BytesIO(data), name=name, size=len(data),
                                     fmt=None, scale=1.0, team=team, user=None)  # fmt: skip


def test_a_refused_archive_leaves_no_folder_behind(team: Team, upload_dir: Path) -> None:
    with pytest.raises(ImportRequestError) as refused:
        start_from(zip_of(("ok.py", b"x"), ("../evil.py", b"x")), "kb.zip", team)

    assert refused.value.field == "archive"
    assert list(upload_dir.iterdir()) == []
    assert not ImportRun.objects.exists()


def test_an_archive_over_the_size_limit_is_refused_before_it_is_read(
    team: Team, upload_dir: Path
) -> None:
    with pytest.raises(ImportRequestError) as refused:
        start_from(zip_of(("big.py", random.Random(0).randbytes(6_000))), "big.zip", team)
    assert "big.zip is " in refused.value.message
    assert "an archive may be at most 5000 (KOPE_IMPORT_MAX_ARCHIVE_BYTES)" in refused.value.message


def test_an_archive_of_no_problems_is_refused_naming_the_archive_not_its_folder(
    team: Team, upload_dir: Path
) -> None:
    with pytest.raises(ImportRequestError) as refused:
        start_from(zip_of(("README.md", b"nothing here")), "notes.zip", team)

    assert refused.value.message.startswith("notes.zip holds neither NPUKernelBench operators")
    assert refused.value.field == "archive"
    assert list(upload_dir.iterdir()) == []


@pytest.mark.usefixtures("short_reference_limits")
def test_an_archive_is_imported_as_its_folder_would_be_and_its_folder_removed_after(
    team: Team, upload_dir: Path
) -> None:
    run = start_from(zip_of(("level1/1_ReLU.py", RELU)), "level1.zip", team)
    assert Path(run.path).is_relative_to(upload_dir) and Path(run.path).name == "level1"

    run = import_execute(run)

    assert (run.status, run.report[0]["outcome"], run.report[0]["operator"]) == (
        "done", "imported", "kb_l1_1_relu")  # fmt: skip
    assert Suite.objects.get(team=team).slug == "kernelbench-level1"
    assert list(upload_dir.iterdir()) == []


def test_the_import_form_says_what_was_wrong_with_an_archive_under_it(
    team: Team, upload_dir: Path, client_for: Callable[[Role | str], Client]
) -> None:
    archive = SimpleUploadedFile("kb.tgz", tar_of(tar_entry("x", tarfile.SYMTYPE, "/")).read())

    page = client_for(Role.ENGINEER).post("/t/kernels/imports/new/", {"archive": archive,
                                                                       "scale": "1"})  # fmt: skip

    text = page.content.decode()
    assert page.status_code == 400
    errors = text[text.index('id="id_archive_error"') :]
    assert "&#x27;x&#x27; is a symbolic link" in errors[: errors.index("</ul>")]
