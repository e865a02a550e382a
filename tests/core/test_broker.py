"""The single-machine broker: messages appear whole, and a file that is not a message is set
aside instead of stopping the worker that reads it."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from kombu import Connection

from apps.runs.tasks import resume_orphaned
from kope_web.broker import PARTIAL_PREFIX, STALE_PARTIAL_SECONDS, message_filename
from tests.processes import celery_worker
from tests.workbench.test_live_events import process_env

BIG = "x" * 4 * 1024 * 1024  # big enough that writing one takes a while


def folders(root: Path) -> dict[str, str]:
    names = ("queue", "control", "processed", "rejected")
    for name in names:
        (root / name).mkdir()
    return {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "control_folder": str(root / "control"),
        "processed_folder": str(root / "processed"),
        "rejected_folder": str(root / "rejected"),
        "polling_interval": 0,
    }


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[dict[str, Any]]:
    yield {"transport": settings.CELERY_BROKER_TRANSPORT, "transport_options": folders(tmp_path)}


def drop_in_queue(options: dict[str, Any], queue: str, content: bytes) -> Path:
    path = Path(options["transport_options"]["data_folder_in"]) / message_filename(queue)
    path.write_bytes(content)
    return path


def test_a_consumer_polling_while_big_messages_are_written_reads_each_whole(
    broker: dict[str, Any],
) -> None:
    count = 30
    received: list[Any] = []

    def consume() -> None:
        with Connection("filesystem://", **broker) as connection:
            queue = connection.SimpleQueue("race")
            while len(received) < count:
                message = queue.get(timeout=30)
                received.append(message.payload)
                message.ack()

    consumer = threading.Thread(target=consume)
    consumer.start()
    with Connection("filesystem://", **broker) as connection:
        queue = connection.SimpleQueue("race")
        for n in range(count):
            queue.put({"n": n, "body": BIG})
    consumer.join(timeout=60)

    assert not consumer.is_alive()
    assert [m["n"] for m in received] == list(range(count))
    assert all(m["body"] == BIG for m in received)


def test_a_file_that_is_not_a_message_is_set_aside_and_the_next_message_is_read(
    broker: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with Connection("filesystem://", **broker) as connection:
        queue = connection.SimpleQueue("mixed")
        empty = drop_in_queue(broker, "mixed", b"")
        time.sleep(0.002)  # the file names sort by the time in ms
        cut_short = drop_in_queue(broker, "mixed", b'{"body": "half')
        time.sleep(0.002)
        queue.put({"n": 1})
        with caplog.at_level(logging.ERROR, logger="kope_web.broker"):
            message = queue.get(timeout=5)
        message.ack()

    assert message.payload == {"n": 1}
    rejected = Path(broker["transport_options"]["rejected_folder"])
    assert sorted(p.name for p in rejected.iterdir()) == sorted([empty.name, cut_short.name])
    assert f"queue mixed: {empty.name} is not a message" in caplog.text
    assert not list(Path(broker["transport_options"]["data_folder_in"]).iterdir())


def test_a_partial_file_a_dead_writer_left_is_swept_once_stale_and_a_fresh_one_is_kept(
    broker: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    queue_folder = Path(broker["transport_options"]["data_folder_in"])
    stale = queue_folder / f"{PARTIAL_PREFIX}dead-writer.tmp"
    stale.write_bytes(b'{"body": "hal')
    long_ago = time.time() - STALE_PARTIAL_SECONDS - 5
    os.utime(stale, (long_ago, long_ago))
    fresh = queue_folder / f"{PARTIAL_PREFIX}writing-now.tmp"
    fresh.write_bytes(b'{"body": "hal')
    with Connection("filesystem://", **broker) as connection:
        queue = connection.SimpleQueue("sweep")
        queue.put({"n": 1})
        with caplog.at_level(logging.WARNING, logger="kope_web.broker"):
            message = queue.get(timeout=5)
            message.ack()
            with pytest.raises(queue.Empty):  # an idle poll reaches the partial files
                queue.get(timeout=0.1)

    assert message.payload == {"n": 1}
    assert sorted(p.name for p in queue_folder.iterdir()) == [fresh.name]
    assert f"removed {stale.name}" in caplog.text


def test_a_worker_reading_an_empty_message_file_goes_on_to_the_next_task(
    transactional_db: None,
) -> None:
    options = {"transport_options": settings.CELERY_BROKER_TRANSPORT_OPTIONS}
    with celery_worker(process_env("single-machine"), "agent", "agent@broker") as worker:
        empty = drop_in_queue(options, "agent", b"")
        sent = resume_orphaned.delay()
        worker.wait_for_output(f"runs.resume_orphaned[{sent.id}] succeeded", timeout=30)
        assert worker.popen.poll() is None, worker.output[-2000:]

    rejected = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["rejected_folder"])  # type: ignore[index]
    assert (rejected / empty.name).exists()
    assert f"{empty.name} is not a message" in worker.output
