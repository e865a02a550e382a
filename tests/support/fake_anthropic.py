"""A scripted stand-in for the Anthropic Messages API, served over real HTTP on 127.0.0.1.

Tests point the real `anthropic` SDK at `FakeAnthropic().base_url` and script the replies:

    with FakeAnthropic() as api:
        api.script(error(529, "overloaded_error", "Overloaded"), message(text("Hi")))
        ...  # call the SDK with base_url=api.base_url
        assert api.requests[0].headers["x-api-key"] == "sk-ant-test"

Each POST /v1/messages takes the next reply from the script, first in, first out. A request
with `"stream": true` gets the reply as the server-sent events the real API sends (message_start,
ping, content_block_start/delta/stop per block with text and tool input split over several
deltas, message_delta, message_stop), in HTTP chunks; otherwise the whole message as JSON. When
the script runs out, the server answers 500 "script exhausted", so a test that makes one request
too many fails loudly instead of hanging or passing by accident.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Block = dict[str, Any]
JsonObject = dict[str, Any]

DEFAULT_USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
REASON_PHRASES = {529: "Overloaded"}

_tool_use_ids = itertools.count(1)


@dataclass(frozen=True)
class MessageReply:
    blocks: tuple[Block, ...]
    stop_reason: str
    usage: dict[str, int]


@dataclass(frozen=True)
class ErrorReply:
    status: int
    type: str
    message: str
    retry_after: float | None = None


@dataclass(frozen=True)
class StreamErrorReply:
    """A stream that starts with 200 and message_start, then fails with an `error` event."""

    type: str
    message: str


@dataclass(frozen=True)
class DroppedStreamReply:
    """A stream that starts with 200 and message_start, then loses its connection."""


Reply = MessageReply | ErrorReply | StreamErrorReply | DroppedStreamReply


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


# Reply builders -----------------------------------------------------------------------------


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Block:
    return {
        "type": "tool_use",
        "id": id or f"toolu_{next(_tool_use_ids)}",
        "name": name,
        "input": input,
    }


def message(
    *blocks: Block, stop_reason: str = "end_turn", usage: dict[str, int] | None = None
) -> MessageReply:
    return MessageReply(
        blocks=blocks, stop_reason=stop_reason, usage={**DEFAULT_USAGE, **(usage or {})}
    )


def error(status: int, type: str, message: str, retry_after: float | None = None) -> ErrorReply:
    return ErrorReply(status=status, type=type, message=message, retry_after=retry_after)


def stream_error(type: str, message: str) -> StreamErrorReply:
    return StreamErrorReply(type=type, message=message)


def dropped_stream() -> DroppedStreamReply:
    return DroppedStreamReply()


# The server ---------------------------------------------------------------------------------


class FakeAnthropic:
    """A Messages API server with scripted replies; use it as a context manager."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._request_numbers = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval, once per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def pending(self) -> int:
        """How many scripted replies have not been served yet."""
        with self._lock:
            return len(self._replies)

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _record(self, request: RecordedRequest) -> tuple[int, Reply | None]:
        with self._lock:
            self.requests.append(request)
            number = next(self._request_numbers)
            return number, (self._replies.popleft() if self._replies else None)


def _handler_for(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(_MessagesHandler):
        api = fake

    return Handler


class _MessagesHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 so the SDK keeps its connection alive and streams arrive in chunks, as for real.
    protocol_version = "HTTP/1.1"
    api: FakeAnthropic
    request_number = 0

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the default writes every request to stderr."""

    def do_GET(self) -> None:
        self._record_request(body=None)
        self._send_json(404, _error_body("not_found_error", f"FakeAnthropic: no GET {self.path}"))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        number, reply = self._record_request(body)
        if self.path.split("?")[0] != "/v1/messages":
            self._send_json(404, _error_body("not_found_error", f"FakeAnthropic: no {self.path}"))
        elif not isinstance(body, dict):
            self._send_json(400, _error_body("invalid_request_error", "body is not a JSON object"))
        elif reply is None:
            exhausted = f"FakeAnthropic script exhausted: no reply scripted for request #{number}"
            self._send_json(500, _error_body("api_error", exhausted))
        else:
            self._answer(reply, body, number)

    def _record_request(self, body: Any) -> tuple[int, Reply | None]:
        headers = {name.lower(): value for name, value in self.headers.items()}
        number, reply = self.api._record(RecordedRequest(self.command, self.path, headers, body))
        self.request_number = number
        return number, reply

    def _answer(self, reply: Reply, body: JsonObject, number: int) -> None:
        model = str(body.get("model", "claude-fake"))
        if isinstance(reply, ErrorReply):
            headers = {} if reply.retry_after is None else {"retry-after": f"{reply.retry_after:g}"}
            self._send_json(reply.status, _error_body(reply.type, reply.message), headers)
        elif isinstance(reply, MessageReply) and not body.get("stream"):
            self._send_json(200, _full_message(reply, model, number))
        elif isinstance(reply, MessageReply):
            self._send_events(_message_events(reply, model, number))
        elif isinstance(reply, StreamErrorReply):
            start = _message_events(MessageReply((), "end_turn", DEFAULT_USAGE), model, number)[0]
            self._send_events([start, ("error", _error_body(reply.type, reply.message))])
        else:
            self._send_dropped_stream(_message_events(message(), model, number)[0])

    def _send_json(
        self, status: int, payload: JsonObject, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self._send_head(
            status, "application/json", {"content-length": str(len(data)), **(headers or {})}
        )
        self.wfile.write(data)

    def _send_events(self, events: list[tuple[str, JsonObject]]) -> None:
        self._send_head(200, "text/event-stream", {"transfer-encoding": "chunked"})
        for name, data in events:
            self._write_chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self._write_chunk(b"")

    def _send_dropped_stream(self, first_event: tuple[str, JsonObject]) -> None:
        self._send_head(200, "text/event-stream", {"transfer-encoding": "chunked"})
        name, data = first_event
        self._write_chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.close_connection = True  # without the final empty chunk: the body is cut short

    def _send_head(self, status: int, content_type: str, headers: dict[str, str]) -> None:
        self.send_response(status, REASON_PHRASES.get(status))
        self.send_header("content-type", content_type)
        self.send_header("request-id", f"req_fake_{self.request_number}")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# Message and event shapes, as the real API sends them -----------------------------------


def _error_body(error_type: str, error_message: str) -> JsonObject:
    return {"type": "error", "error": {"type": error_type, "message": error_message}}


def _full_message(reply: MessageReply, model: str, number: int) -> JsonObject:
    return {
        "id": f"msg_fake_{number}",
        "type": "message",
        "role": "assistant",
        "content": list(reply.blocks),
        "model": model,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": dict(reply.usage),
    }


def _message_events(reply: MessageReply, model: str, number: int) -> list[tuple[str, JsonObject]]:
    # message_start carries the input and cache counts and a placeholder output count of 1;
    # message_delta then gives the final output count (cumulative, so it replaces the 1).
    started = {
        **_full_message(reply, model, number),
        "content": [],
        "stop_reason": None,
        "usage": {**reply.usage, "output_tokens": 1},
    }
    events: list[tuple[str, JsonObject]] = [
        ("message_start", {"type": "message_start", "message": started}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(reply.blocks):
        events.extend(_block_events(index, block))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": reply.usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_events(index: int, block: Block) -> list[tuple[str, JsonObject]]:
    if block["type"] == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": part} for part in _halves(block["text"])]
    elif block["type"] == "tool_use":
        start = {**block, "input": {}}
        # The real API opens a tool's input with an empty partial_json; the SDK must cope.
        parts = ["", *_halves(json.dumps(block["input"]))]
        deltas = [{"type": "input_json_delta", "partial_json": part} for part in parts]
    else:
        raise ValueError(f"FakeAnthropic cannot stream a {block['type']!r} block")
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        ),
        *[
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        ],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _halves(value: str) -> list[str]:
    middle = len(value) // 2
    return [value[:middle], value[middle:]]
