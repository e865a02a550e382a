"""One model turn against the Anthropic Messages API, with our own retries.

`ModelClient.turn` sends the system prompt, the conversation and the tools, and returns the
assistant's reply as plain dicts (`ModelTurn`), with the token usage and the number of HTTP
attempts it took. The SDK's own retries are off (`max_retries=0`) so that this module decides,
counts and logs every retry, and so that a session can be paused with a reason a person can read:
when retries run out, or the API refuses the request, `turn` raises `ModelUnavailable`.

Retried: 429, any status >= 500 (529 "overloaded" included), connection errors and timeouts,
an `error` event in the middle of a stream (it arrives on a 200 response), and a stream whose
connection drops part-way. Not retried: any other 4xx (bad request, authentication, permission,
not found), and responses the SDK cannot read.

The wait before retry n (0-based) is `min(backoff_max_s, backoff_base_s * 2**n)` scaled by a
jitter factor drawn uniformly from [0.5, 1.0), so that sessions throttled together do not all
come back together; pass a seeded `random.Random` for repeatable waits. A `retry-after` header
(seconds or an HTTP date) replaces that computation, without jitter, capped at `backoff_max_s`.

The API key never appears in what this module logs or raises: it is not part of any message we
build, and reasons taken from API responses are scrubbed of it in case a proxy echoes it back.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, cast

import anthropic
import httpx2
from anthropic.types import (
    ContentBlock,
    Message,
    MessageParam,
    TextBlock,
    TextBlockParam,
    ToolUnionParam,
    ToolUseBlock,
    Usage,
)

logger = logging.getLogger(__name__)

# Error types that an `error` event in the middle of a stream may carry and that are worth
# another try; on a plain HTTP error the status code decides instead.
RETRYABLE_STREAM_ERROR_TYPES = frozenset(
    {"api_error", "overloaded_error", "rate_limit_error", "timeout_error"}
)
MAX_REASON_CHARS = 300
REDACTED = "***"
# Shorter "keys" (test placeholders) are not scrubbed: replacing them would mangle the reason.
MIN_SCRUBBED_KEY_CHARS = 8

FailureKind = Literal["transient", "refused", "unusable"]


@dataclass(frozen=True)
class TurnUsage:
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )

    def as_json(self) -> dict[str, int]:
        """The four counters, by name (`TurnUsage(**usage.as_json())` round-trips)."""
        return asdict(self)

    @classmethod
    def from_sdk(cls, usage: Usage) -> TurnUsage:
        return cls(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
            cache_read_input_tokens=usage.cache_read_input_tokens or 0,
        )


@dataclass(frozen=True)
class ModelTurn:
    """The assistant's reply: `content` holds blocks as plain dicts, ready to be sent back.

    `stop_reason` is the API's ("end_turn", "tool_use", "max_tokens", ...), or "" if it sent
    none. `attempts` counts HTTP requests, the successful one included.
    """

    content: list[dict[str, Any]]
    stop_reason: str
    usage: TurnUsage
    model: str
    request_id: str | None
    attempts: int


class ModelUnavailable(RuntimeError):
    """Retries ran out (`retryable`: worth trying again later) or the API refused the request.

    `str()` is a reason for a person: the status, the API's error type and its message.
    """

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.retryable = retryable


@dataclass(frozen=True, repr=False)
class ClientSettings:
    api_key: str
    model: str
    base_url: str | None = None
    max_tokens: int = 4096
    max_retries: int = 4
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    timeout_s: float = 120.0
    stream: bool = True

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{field.name}={REDACTED if field.name == 'api_key' else getattr(self, field.name)!r}"
            for field in fields(self)
        )
        return f"ClientSettings({shown})"


@dataclass(frozen=True)
class _Failure:
    kind: FailureKind
    reason: str
    retry_after_s: float | None = None

    @property
    def retryable(self) -> bool:
        return self.kind == "transient"

    def summary(self, attempts: int) -> str:
        if self.kind == "transient":
            plural = "s" if attempts != 1 else ""
            return f"Anthropic API unavailable after {attempts} attempt{plural}: {self.reason}"
        if self.kind == "refused":
            return f"Anthropic API refused the request: {self.reason}"
        return f"Anthropic API sent a response that could not be used: {self.reason}"


class ModelClient:
    def __init__(
        self,
        settings: ClientSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not secrets)
        self._client = anthropic.Anthropic(
            api_key=settings.api_key,
            base_url=settings.base_url,
            max_retries=0,
            timeout=settings.timeout_s,
        )

    def turn(
        self,
        *,
        system: str | list[dict[str, Any]],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> ModelTurn:
        attempts = 0
        while True:
            attempts += 1
            try:
                message, request_id = self._request(system, messages, tools)
            except (anthropic.APIError, httpx2.TransportError) as exc:
                failure = self._scrubbed(describe_failure(exc, self.settings.timeout_s))
                self._give_up_or_wait(failure, attempts, exc)
            else:
                return ModelTurn(
                    content=[block_as_dict(block) for block in message.content],
                    stop_reason=message.stop_reason or "",
                    usage=TurnUsage.from_sdk(message.usage),
                    model=message.model,
                    request_id=request_id,
                    attempts=attempts,
                )

    def _give_up_or_wait(self, failure: _Failure, attempts: int, exc: Exception) -> None:
        if not failure.retryable or attempts > self.settings.max_retries:
            summary = self._scrub(failure.summary(attempts))
            raise ModelUnavailable(summary, retryable=failure.retryable) from exc
        wait_s = self._wait_before_retry(failure, retry_index=attempts - 1)
        logger.warning(
            "Anthropic API %s; retrying in %.1fs (attempt %d of %d)",
            self._scrub(failure.reason),
            wait_s,
            attempts + 1,
            self.settings.max_retries + 1,
        )
        self._sleep(wait_s)

    def _wait_before_retry(self, failure: _Failure, retry_index: int) -> float:
        cap = self.settings.backoff_max_s
        if failure.retry_after_s is not None:
            return min(cap, failure.retry_after_s)
        exponential = min(cap, self.settings.backoff_base_s * 2.0**retry_index)
        return exponential * (0.5 + 0.5 * self._rng.random())

    def _scrubbed(self, failure: _Failure) -> _Failure:
        # Scrubbed before it is cut short: a key across the cut would match no longer.
        return replace(failure, reason=_shorten(self._scrub(failure.reason)))

    def _scrub(self, text: str) -> str:
        key = self.settings.api_key
        return text.replace(key, REDACTED) if len(key) >= MIN_SCRUBBED_KEY_CHARS else text

    def _request(
        self,
        system: str | list[dict[str, Any]],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> tuple[Message, str | None]:
        # The policy builds plain dicts; the SDK's TypedDicts describe the same JSON.
        typed_system = cast("str | Iterable[TextBlockParam]", system)
        typed_messages = cast("list[MessageParam]", messages)
        typed_tools = cast("list[ToolUnionParam]", tools) if tools else anthropic.omit
        if self.settings.stream:
            with self._client.messages.stream(
                model=self.settings.model,
                max_tokens=self.settings.max_tokens,
                system=typed_system,
                messages=typed_messages,
                tools=typed_tools,
            ) as stream:
                return stream.get_final_message(), stream.request_id
        message = self._client.messages.create(
            model=self.settings.model,
            max_tokens=self.settings.max_tokens,
            system=typed_system,
            messages=typed_messages,
            tools=typed_tools,
        )
        return message, message._request_id


def block_as_dict(block: ContentBlock) -> dict[str, Any]:
    """A content block as the JSON the API takes back in the next request."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    # Blocks the policy does not ask for (thinking, server tools) pass through whole.
    return block.model_dump(mode="json", exclude_none=True)


def describe_failure(exc: Exception, timeout_s: float) -> _Failure:
    # APITimeoutError is a kind of APIConnectionError: test it first.
    if isinstance(exc, anthropic.APITimeoutError):
        return _Failure("transient", f"request timed out (timeout {timeout_s:g}s)")
    if isinstance(exc, anthropic.APIConnectionError):
        return _Failure("transient", f"connection error: {_cause_of(exc)}")
    if isinstance(exc, httpx2.TransportError):
        # SDKs before 2.17 wrap transport errors only while sending: a connection dropped or a
        # read timed out once a stream is open reaches us as httpx2's own exception.
        return _Failure("transient", f"stream interrupted: {type(exc).__name__}: {exc}")
    if isinstance(exc, anthropic.APIStatusError):
        return _status_failure(exc)
    return _Failure("unusable", str(exc))


def _status_failure(exc: anthropic.APIStatusError) -> _Failure:
    error_type, error_message = _error_fields(exc)
    status = exc.status_code
    if status < 400:
        # An `error` event inside a stream: the SDK reports it with the stream's 200 status.
        reason = f"{error_type} during the stream: {error_message}"
        kind: FailureKind = (
            "transient" if error_type in RETRYABLE_STREAM_ERROR_TYPES else "unusable"
        )
        return _Failure(kind, reason)
    reason = f"{status} {error_type}: {error_message}"
    if status == 429 or status >= 500:
        return _Failure(
            "transient", reason, _retry_after_s(exc.response.headers.get("retry-after"))
        )
    return _Failure("refused", reason)


def _error_fields(exc: anthropic.APIStatusError) -> tuple[str, str]:
    """The `error.type` and `error.message` of an API error body, or stand-ins for a body that
    is not the API's JSON (an HTML page from a proxy, say)."""
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("type", "unknown_error")), str(error.get("message", ""))
    return "http_error", body if isinstance(body, str) and body else exc.message


def _retry_after_s(header: str | None) -> float | None:
    """`retry-after` in seconds, from either form HTTP allows: delta-seconds or an HTTP date."""
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _cause_of(exc: anthropic.APIConnectionError) -> str:
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause else exc.message


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"
