"""Celery's filesystem transport (the single-machine broker), safe for processes that race or
die mid-way. kombu's own writes a message in place and its readers take any file named like a
message: a reader that comes between the writer's open and write, or a writer killed there,
leaves a worker reading an empty file, and the JSON error stops that worker for good.

Here a message is written aside and renamed into the queue folder, so it appears whole; one
consumer claims it by renaming it into the processed folder (atomic on one filesystem, so two
consumers never take the same file; kept there only with `store_processed`); and a file that
is not a message is moved to the rejected folder with an error in the log, and the worker goes
on to the next. What a writer killed mid-write left aside is swept away once it is older than
any write takes.

The Redis transport (many hosts) is kombu's, with a channel whose close a worker survives when
Redis goes under a message the worker has not acknowledged yet (RedisChannel)."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, redis
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from redis.exceptions import ConnectionError as RedisConnectionError

logger = logging.getLogger(__name__)

PARTIAL_PREFIX = "partial_"  # a message still being written; never matches a queue's name
# A message is written in well under a second; a partial file this old lost its writer.
STALE_PARTIAL_SECONDS = 600


def message_filename(queue: str) -> str:
    """kombu's naming: the time in ms first, so a sorted listing is the order sent."""
    return f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"


def is_message_of(filename: str, queue: str) -> bool:
    return filename.partition(".")[2] == f"{queue}.msg"


def decoded_message(payload: bytes) -> dict[str, Any] | None:
    try:
        message = loads(bytes_to_str(payload))
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


class Channel(filesystem.Channel):
    # kombu's own classes name the second argument differently (message, payload).
    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        folder = self.data_folder_out
        final = os.path.join(folder, message_filename(queue))
        partial = os.path.join(folder, f"{PARTIAL_PREFIX}{uuid.uuid4()}.tmp")
        try:
            Path(partial).write_bytes(str_to_bytes(dumps(message)))
            os.replace(partial, final)
        except OSError as error:
            raise ChannelError(f"cannot add a message to {folder!r}: {error}") from error

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.startswith(PARTIAL_PREFIX):
                self.sweep_if_stale(filename)
            if not is_message_of(filename, queue):
                continue
            claimed = self.claimed(filename)
            if claimed is None:
                continue
            message = decoded_message(claimed.read_bytes())
            if message is not None:
                if not self.store_processed:
                    claimed.unlink()
                return message
            self.reject(claimed, queue)
        raise Empty()

    def claimed(self, filename: str) -> Path | None:
        """The message file moved out of the queue by this consumer; None when another took it."""
        claimed = Path(self.processed_folder) / filename
        try:
            os.rename(os.path.join(self.data_folder_in, filename), claimed)
        except OSError:
            return None
        return claimed

    def sweep_if_stale(self, filename: str) -> None:
        path = Path(self.data_folder_in) / filename
        try:
            if time.time() - path.stat().st_mtime > STALE_PARTIAL_SECONDS:
                path.unlink()
                logger.warning("removed %s from %s: its writer died before finishing it",
                               filename, self.data_folder_in)  # fmt: skip
        except FileNotFoundError:
            pass  # its writer finished, or another consumer swept it

    def reject(self, claimed: Path, queue: str) -> None:
        folder = Path(self.transport_options.get("rejected_folder", "rejected"))
        folder.mkdir(parents=True, exist_ok=True)
        os.replace(claimed, folder / claimed.name)
        logger.error("queue %s: %s is not a message (not a JSON object); moved to %s and "
                     "skipped", queue, claimed.name, folder)  # fmt: skip


class Transport(filesystem.Transport):
    Channel = Channel


class RedisChannel(redis.Channel):
    """kombu's Redis channel, whose close() a worker can always get through. A worker that
    loses Redis while it holds a message it has not acknowledged collects its connection
    (kombu detaches the transport) and then closes it, ignoring connection errors; kombu's
    close puts the unacknowledged message back, and with the transport detached, or with
    the BRPOP connection already torn down, fails with AttributeError, which Celery takes
    for an unrecoverable error: the worker process exits instead of reconnecting. Here that
    failure is the connection error it is. The message stays in Redis's unacked set, and
    kombu puts it back in its queue once `visibility_timeout` has passed."""

    def close(self) -> None:
        try:
            super().close()
        except AttributeError as torn_down:
            raise RedisConnectionError(
                f"the broker connection was torn down: {torn_down}"
            ) from torn_down


class RedisTransport(redis.Transport):
    Channel = RedisChannel
