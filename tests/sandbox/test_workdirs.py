"""Work dirs on real processes: one whose owner was SIGKILLed is removed, one a live process
holds stays, the sweep never follows a symlink out of its base, and a worker that starts
sweeps /dev/shm, KOPE_EVAL_WORK_DIR and the temp folder."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from apps.devices.evaluator import default_work_dir, work_dir_for
from apps.sandbox.workdirs import LOCK_NAME, UNCLAIMED_AFTER_S, claim, remove_abandoned, temporary
from tests.processes import celery_worker
from tests.workbench.test_live_events import process_env

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = ["kope-eval-"]

# A process that makes and claims a work dir, says where, and works until it is killed.
OWNER = """
import sys, tempfile, time
from apps.sandbox.workdirs import claim
folder = tempfile.mkdtemp(prefix="kope-eval-", dir=sys.argv[1])
claim(folder)
print(folder, flush=True)
time.sleep(120)
"""


@contextmanager
def owner_of_a_work_dir(base: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    process = subprocess.Popen([sys.executable, "-c", OWNER, str(base)], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        yield process, Path(process.stdout.readline().strip())
    finally:
        process.kill()
        process.wait()


def test_a_dead_owners_work_dir_is_removed_and_a_live_owners_kept(tmp_path: Path) -> None:
    with owner_of_a_work_dir(tmp_path) as (dead, abandoned), owner_of_a_work_dir(tmp_path) as live:
        in_use = live[1]
        (abandoned / "sandbox").mkdir()
        (abandoned / "sandbox" / "output.bin").write_bytes(b"\0" * 4096)
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        assert remove_abandoned([tmp_path], PREFIXES) == [abandoned]
        assert not abandoned.exists()
        assert in_use.is_dir() and (in_use / LOCK_NAME).exists()
        assert remove_abandoned([tmp_path], PREFIXES) == []


def test_a_released_claim_lets_the_folder_go_and_the_sweep_keeps_to_its_prefixes(
    tmp_path: Path,
) -> None:
    ours, other = tmp_path / "kope-eval-done", tmp_path / "kope-load-data"
    for folder in (ours, other):
        folder.mkdir()
        claim(folder).release()
    with claim(tmp_path / "kope-eval-done"):
        assert remove_abandoned([tmp_path], PREFIXES) == []  # this process holds it now
    assert remove_abandoned([tmp_path], PREFIXES) == [ours]
    assert other.is_dir()


def test_a_folder_without_a_lock_file_goes_only_once_it_is_old(tmp_path: Path) -> None:
    """Made by a version before claims: its owner cannot be asked, so its age decides."""
    young, old = tmp_path / "kope-eval-young", tmp_path / "kope-eval-old"
    for folder in (young, old):
        (folder / "judge").mkdir(parents=True)
    long_ago = time.time() - UNCLAIMED_AFTER_S - 60
    for path in (old / "judge", old):
        os.utime(path, (long_ago, long_ago))
    assert remove_abandoned([tmp_path], PREFIXES) == [old]
    assert young.is_dir()


def test_the_sweep_follows_no_symlink_out_of_its_base(tmp_path: Path) -> None:
    base, outside = tmp_path / "base", tmp_path / "outside"
    base.mkdir()
    outside.mkdir()
    claim(outside).release()  # abandoned, but not in the base
    (base / "kope-eval-link").symlink_to(outside)
    planted = base / "kope-eval-planted-lock"
    planted.mkdir()
    (tmp_path / "free.lock").touch()  # a lock anyone could take, outside the work dir
    (planted / LOCK_NAME).symlink_to(tmp_path / "free.lock")
    assert remove_abandoned([base], PREFIXES) == []
    assert outside.is_dir() and (base / "kope-eval-link").is_symlink() and planted.is_dir()


@pytest.mark.timeout(10)  # a sweep that blocks never returns
def test_a_fifo_in_place_of_the_lock_file_neither_blocks_the_sweep_nor_is_taken_for_one(
    tmp_path: Path,
) -> None:
    """The sandbox user owns its work dir and may swap the lock file for a FIFO: opening that
    for reading waited for a writer, and a worker that starts hung before its pool came up."""
    planted = tmp_path / "kope-eval-fifo"
    planted.mkdir()
    os.mkfifo(planted / LOCK_NAME)
    assert remove_abandoned([tmp_path], PREFIXES) == []
    assert planted.is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the sandbox user needs root")
def test_a_lock_file_of_another_user_does_not_lend_its_folder_to_the_sweep(
    tmp_path: Path,
) -> None:
    """One the sandbox user put in its own work dir (whose owner is alive), or another user's
    folder under a kope- name in the shared temp folder: root could lock it, and removed it."""
    nobody = pwd.getpwnam("nobody")
    planted, lockless = tmp_path / "kope-eval-planted", tmp_path / "kope-eval-lockless"
    for folder in (planted, lockless):
        folder.mkdir()
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    (planted / LOCK_NAME).touch()
    os.chown(planted / LOCK_NAME, nobody.pw_uid, nobody.pw_gid)
    long_ago = time.time() - UNCLAIMED_AFTER_S - 60
    os.utime(lockless, (long_ago, long_ago))
    assert remove_abandoned([tmp_path], PREFIXES) == []
    assert planted.is_dir() and lockless.is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the sandbox user needs root")
def test_a_work_dir_handed_to_the_sandbox_user_is_removed_and_its_links_not_followed(
    tmp_path: Path,
) -> None:
    nobody = pwd.getpwnam("nobody")
    base, outside = tmp_path / "base", tmp_path / "outside"
    base.mkdir()
    (outside / "kept").mkdir(parents=True)
    with owner_of_a_work_dir(base) as (dead, abandoned):
        kernels = abandoned / "made-by-the-kernel"
        kernels.mkdir(mode=0o700)
        (kernels / "out.bin").write_bytes(b"x")
        (kernels / "elsewhere").symlink_to(outside)
        # Handed over as the sandbox's policies.workdir does; the lock file stays root's.
        for path in (abandoned, kernels, kernels / "out.bin"):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        dead.kill()
        dead.wait()
        assert remove_abandoned([base], PREFIXES) == [abandoned]
    assert not abandoned.exists() and (outside / "kept").is_dir()


def test_a_temporary_work_dir_is_claimed_while_in_use_and_gone_after(tmp_path: Path) -> None:
    with temporary("kope-build-", tmp_path) as folder:
        assert remove_abandoned([tmp_path], ["kope-build-"]) == []
        assert (folder / LOCK_NAME).exists()
    assert not folder.exists()


def test_a_worker_that_starts_removes_what_a_killed_one_left_in_dev_shm(
    transactional_db: None, tmp_path: Path
) -> None:
    """Its evaluation's folder in /dev/shm (memory) and the build's in the temp folder stayed
    until the machine restarted: a worker killed mid-evaluation never ran its clean-up."""
    shm = Path(default_work_dir() or tempfile.gettempdir())
    configured = tmp_path / "work"
    configured.mkdir()
    env = process_env("single-machine") | {"KOPE_EVAL_WORK_DIR": str(configured)}
    with (
        owner_of_a_work_dir(shm) as (in_shm, left_in_shm),
        owner_of_a_work_dir(configured) as (in_configured, left_in_configured),
        owner_of_a_work_dir(shm) as (_, in_use),
    ):
        for dead in (in_shm, in_configured):
            dead.kill()
            dead.wait()
        with celery_worker(env, "device.cpu", "device@sweep") as worker:
            pass  # ready: the sweep ran before the pool started
        assert not left_in_shm.exists() and not left_in_configured.exists(), worker.output
        assert in_use.is_dir()
    # The log names what it removed; /dev/shm is shared, and a worker another test started
    # meanwhile may have removed that one first.
    assert str(left_in_configured) in worker.output, worker.output


@pytest.mark.skipif(default_work_dir() is None, reason="no writable /dev/shm here")
def test_an_evaluation_first_removes_what_dead_ones_left_in_memory_and_goes_to_disk_if_big() -> (
    None
):
    """Killed evaluations of imported problems left 12 GiB in /dev/shm, the machine's memory:
    later processes were killed for memory, and one worker's sweep was no help to
    `manage.py evaluate` or the benchmarks, which start none."""
    shm = Path(str(default_work_dir()))
    with owner_of_a_work_dir(shm) as (dead, abandoned):
        dead.send_signal(signal.SIGKILL)
        dead.wait()

        assert work_dir_for(0) == str(shm)
        assert not abandoned.exists()
    usage = shutil.disk_usage(shm)  # tests beside this one use it too: wide margins
    assert work_dir_for(usage.free // 16) == str(shm)
    assert work_dir_for(usage.total) is None  # the system temp folder
