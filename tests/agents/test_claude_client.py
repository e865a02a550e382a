"""The Claude model client, through the real `anthropic` SDK over HTTP to a scripted server."""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from apps.agents.claude.client import (
    MIN_SCRUBBED_KEY_CHARS,
    ClientSettings,
    ModelClient,
    ModelTurn,
    ModelUnavailable,
    TurnUsage,
)
from tests.support.fake_anthropic import (
    FakeAnthropic,
    RecordedRequest,
    dropped_stream,
    error,
    message,
    stream_error,
    text,
    tool_use,
)

API_KEY = "sk-ant-test-SECRET-1234"
MODEL = "claude-test-model"
PROMPT = "Make the 64x64 matmul kernel faster."
SYSTEM = [
    {"type": "text", "text": "You optimise GPU kernels.", "cache_control": {"type": "ephemeral"}}
]
MESSAGES = [{"role": "user", "content": PROMPT}]
TOOLS = [
    {
        "name": "run_benchmark",
        "description": "Compile and time a kernel.",
        "input_schema": {
            "type": "object",
            "properties": {"kernel": {"type": "string"}, "sizes": {"type": "array"}},
            "required": ["kernel"],
        },
    }
]
USAGE = {
    "input_tokens": 120,
    "output_tokens": 45,
    "cache_creation_input_tokens": 30,
    "cache_read_input_tokens": 900,
}


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def sleeps() -> list[float]:
    return []


def client_for(base_url: str, sleeps: list[float], **overrides: Any) -> ModelClient:
    settings = ClientSettings(api_key=API_KEY, model=MODEL, base_url=base_url, **overrides)
    return ModelClient(settings, sleep=sleeps.append, rng=random.Random(7))


def take_turn(client: ModelClient) -> ModelTurn:
    return client.turn(system=SYSTEM, messages=MESSAGES, tools=TOOLS)


def api_key_sent(request: RecordedRequest) -> str | None:
    # SDK 2.x sends the key as a bearer token; earlier versions sent it as x-api-key.
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    return request.headers.get("x-api-key") or bearer or None


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# A turn that succeeds -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_turn_returns_the_blocks_as_dicts_with_usage_and_model(
    api: FakeAnthropic, sleeps: list[float], stream: bool
) -> None:
    tool_input = {"kernel": "__global__ void mm() {}", "sizes": [64, 128], "note": 'é\n"q"'}
    api.script(
        message(
            text("Let me measure the baseline first."),
            tool_use("run_benchmark", tool_input, id="toolu_01"),
            stop_reason="tool_use",
            usage=USAGE,
        )
    )

    turn = take_turn(client_for(api.base_url, sleeps, stream=stream))

    assert turn.content == [
        {"type": "text", "text": "Let me measure the baseline first."},
        {"type": "tool_use", "id": "toolu_01", "name": "run_benchmark", "input": tool_input},
    ]
    assert turn.stop_reason == "tool_use"
    assert turn.usage == TurnUsage(
        input_tokens=120,
        output_tokens=45,
        cache_creation_input_tokens=30,
        cache_read_input_tokens=900,
    )
    assert turn.model == MODEL
    assert turn.request_id == "req_fake_1"
    assert turn.attempts == 1
    assert sleeps == []


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_the_request_carries_the_key_version_system_tools_and_stream_flag(
    api: FakeAnthropic, sleeps: list[float], stream: bool
) -> None:
    api.script(message(text("Hello.")))

    take_turn(client_for(api.base_url, sleeps, stream=stream, max_tokens=1000))

    [request] = api.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert api_key_sent(request) == API_KEY
    assert request.headers["anthropic-version"]
    assert request.body["model"] == MODEL
    assert request.body["max_tokens"] == 1000
    assert request.body["system"] == SYSTEM
    assert request.body["messages"] == MESSAGES
    assert request.body["tools"] == TOOLS
    assert request.body.get("stream", False) is stream


def test_a_turn_without_tools_sends_no_tools(api: FakeAnthropic, sleeps: list[float]) -> None:
    api.script(message(text("Hello.")))

    client_for(api.base_url, sleeps).turn(system="Be brief.", messages=MESSAGES, tools=[])

    assert "tools" not in api.requests[0].body
    assert api.requests[0].body["system"] == "Be brief."


def test_usage_counts_and_total() -> None:
    usage = TurnUsage(
        input_tokens=1, output_tokens=2, cache_creation_input_tokens=3, cache_read_input_tokens=4
    )

    assert usage.total == 10
    assert usage.as_json() == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_creation_input_tokens": 3,
        "cache_read_input_tokens": 4,
    }
    assert TurnUsage(**usage.as_json()) == usage


# Retries and giving up ----------------------------------------------------------------------


@pytest.mark.parametrize(("retry_after", "waited"), [(2, 2), (90, 30)], ids=["as-sent", "capped"])
def test_a_rate_limit_waits_as_long_as_the_server_asks_up_to_the_cap(
    api: FakeAnthropic, sleeps: list[float], retry_after: float, waited: float
) -> None:
    api.script(
        error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your rate limit.",
            retry_after,
        ),
        message(text("Done.")),
    )

    turn = take_turn(client_for(api.base_url, sleeps, backoff_max_s=30.0))

    assert turn.attempts == 2
    assert turn.request_id == "req_fake_2"
    assert sleeps == [waited]


def test_overloaded_until_retries_run_out_is_unavailable_and_retryable(
    api: FakeAnthropic, sleeps: list[float]
) -> None:
    api.script(*[error(529, "overloaded_error", "Overloaded")] * 5)

    with pytest.raises(ModelUnavailable) as raised:
        take_turn(client_for(api.base_url, sleeps, max_retries=4, backoff_max_s=5.0))

    assert raised.value.retryable
    assert str(raised.value) == (
        "Anthropic API unavailable after 5 attempts: 529 overloaded_error: Overloaded"
    )
    assert len(api.requests) == 5
    # Exponential, capped at 5s, each scaled by a jitter factor in [0.5, 1).
    ceilings = [1.0, 2.0, 4.0, 5.0]
    assert len(sleeps) == len(ceilings)
    for waited, ceiling in zip(sleeps, ceilings, strict=True):
        assert ceiling / 2 <= waited < ceiling


def test_server_errors_are_retried_until_one_succeeds(
    api: FakeAnthropic, sleeps: list[float]
) -> None:
    api.script(
        error(500, "api_error", "Internal server error"),
        error(529, "overloaded_error", "Overloaded"),
        message(text("Done.")),
    )

    turn = take_turn(client_for(api.base_url, sleeps))

    assert turn.attempts == 3
    assert turn.content == [{"type": "text", "text": "Done."}]
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    ("status", "error_type", "error_message"),
    [
        (401, "authentication_error", "invalid x-api-key"),
        (400, "invalid_request_error", "messages: at least one message is required"),
        (403, "permission_error", "Your API key does not have permission to use this model."),
        (404, "not_found_error", "model: claude-test-model"),
    ],
)
def test_a_refused_request_is_not_retried(
    api: FakeAnthropic, sleeps: list[float], status: int, error_type: str, error_message: str
) -> None:
    api.script(error(status, error_type, error_message))

    with pytest.raises(ModelUnavailable) as raised:
        take_turn(client_for(api.base_url, sleeps))

    assert not raised.value.retryable
    assert str(raised.value) == (
        f"Anthropic API refused the request: {status} {error_type}: {error_message}"
    )
    assert len(api.requests) == 1
    assert sleeps == []


def test_an_overload_in_the_middle_of_a_stream_is_retried(
    api: FakeAnthropic, sleeps: list[float]
) -> None:
    api.script(stream_error("overloaded_error", "Overloaded"), message(text("Done.")))

    turn = take_turn(client_for(api.base_url, sleeps))

    assert turn.attempts == 2
    assert turn.content == [{"type": "text", "text": "Done."}]


def test_a_stream_whose_connection_drops_is_retried(
    api: FakeAnthropic, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    api.script(dropped_stream(), message(text("Done.")))

    with caplog.at_level(logging.WARNING, logger="apps.agents.claude.client"):
        turn = take_turn(client_for(api.base_url, sleeps))

    assert turn.attempts == 2
    assert turn.content == [{"type": "text", "text": "Done."}]
    # Before 2.17 the SDK let the cut-short body through as httpx2's own error ("stream
    # interrupted"); from 2.17 it wraps it ("connection error"). Either way the log names the cause.
    assert "RemoteProtocolError: peer closed connection" in caplog.text
    assert "retrying in" in caplog.text


def test_an_unreachable_server_is_retried_then_unavailable(sleeps: list[float]) -> None:
    client = client_for(f"http://127.0.0.1:{unused_port()}", sleeps, max_retries=1)

    with pytest.raises(ModelUnavailable) as raised:
        take_turn(client)

    assert raised.value.retryable
    assert str(raised.value).startswith("Anthropic API unavailable after 2 attempts: connection")
    assert len(sleeps) == 1


def test_an_exhausted_script_fails_loudly(api: FakeAnthropic, sleeps: list[float]) -> None:
    api.script(message(text("The only reply.")))
    client = client_for(api.base_url, sleeps, max_retries=0)
    take_turn(client)

    with pytest.raises(ModelUnavailable, match=r"500 api_error: FakeAnthropic script exhausted"):
        take_turn(client)

    assert api.pending == 0
    assert len(api.requests) == 2


# The key stays secret -----------------------------------------------------------------------


def test_settings_never_show_the_key() -> None:
    settings = ClientSettings(api_key=API_KEY, model=MODEL)

    assert API_KEY not in repr(settings)
    assert API_KEY not in str(settings)
    assert "api_key='***'" in repr(settings)
    assert f"model={MODEL!r}" in repr(settings)


def test_the_key_and_prompt_stay_out_of_errors_and_our_logs(
    api: FakeAnthropic, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    api.script(
        error(529, "overloaded_error", "Overloaded"),
        message(text("Done.")),
        error(401, "authentication_error", "invalid x-api-key"),
    )
    client = client_for(api.base_url, sleeps)

    caplog.set_level(logging.DEBUG)
    for name in ("anthropic", "httpx2", "httpcore2", "apps.agents.claude.client"):
        caplog.set_level(logging.DEBUG, logger=name)
    take_turn(client)
    with pytest.raises(ModelUnavailable) as raised:
        take_turn(client)

    assert API_KEY not in str(raised.value)
    assert API_KEY not in repr(raised.value)
    assert any(record.name.startswith("anthropic") for record in caplog.records)
    for record in caplog.records:
        assert API_KEY not in record.getMessage()
    assert API_KEY not in caplog.text
    [retry] = [r for r in caplog.records if r.name == "apps.agents.claude.client"]
    assert retry.levelno == logging.WARNING
    assert retry.getMessage().startswith("Anthropic API 529 overloaded_error: Overloaded; retrying")
    assert PROMPT not in retry.getMessage()


def test_a_key_echoed_back_by_the_server_is_scrubbed(
    api: FakeAnthropic, sleeps: list[float]
) -> None:
    api.script(error(401, "authentication_error", f"invalid x-api-key {API_KEY}"))

    with pytest.raises(ModelUnavailable) as raised:
        take_turn(client_for(api.base_url, sleeps))

    assert API_KEY not in str(raised.value)
    assert str(raised.value).endswith("invalid x-api-key ***")


def test_a_key_echoed_back_where_the_reason_is_cut_short_is_scrubbed_whole(
    api: FakeAnthropic, sleeps: list[float]
) -> None:
    """A reason is cut to MAX_REASON_CHARS; cut first, a key across the cut was left half
    shown, too short to match the key it scrubs."""
    key = "sk-ant-api03-" + "Qx7vLm2Rp9" * 9  # as long as a real key
    padding = "the request was rejected by the upstream proxy " * 5
    api.script(error(401, "authentication_error", f"{padding}invalid x-api-key {key}"))
    settings = ClientSettings(api_key=key, model=MODEL, base_url=api.base_url)

    with pytest.raises(ModelUnavailable) as raised:
        take_turn(ModelClient(settings, sleep=sleeps.append))

    assert str(raised.value).startswith("Anthropic API refused the request: 401")
    assert key[:MIN_SCRUBBED_KEY_CHARS] not in str(raised.value)


# The fake server itself ---------------------------------------------------------------------


def test_the_fake_streams_the_event_sequence_of_the_real_api(api: FakeAnthropic) -> None:
    api.script(message(text("Hi there"), tool_use("run_benchmark", {"kernel": "mm"})))
    sdk = anthropic.Anthropic(api_key=API_KEY, base_url=api.base_url, max_retries=0)

    events = list(sdk.messages.create(model=MODEL, max_tokens=10, messages=MESSAGES, stream=True))

    assert [event.type for event in events] == [
        "message_start",
        *["content_block_start", "content_block_delta", "content_block_delta"],
        "content_block_stop",
        *["content_block_start", "content_block_delta", "content_block_delta"],
        *["content_block_delta", "content_block_stop"],
        "message_delta",
        "message_stop",
    ]
    start = events[0]
    assert start.type == "message_start"
    assert start.message.content == []
    assert start.message.usage.output_tokens == 1
