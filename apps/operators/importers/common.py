"""What the importers share: a found problem, size limits, level and family from names."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils.text import Truncator

from apps.operators.definitions import OperatorDefinition

MAX_NAME_CHARS, MAX_PATH_CHARS = 200, 500  # OperatorVersion.name, OperatorVersion.origin_path


class ProblemError(ValueError):
    """A problem on disk that cannot become an operator; the message names file and line."""


@dataclass(frozen=True)
class FoundProblem:
    """One problem found under an import folder: a definition, or why there is none."""

    label: str  # the path relative to the import folder
    definition: OperatorDefinition | None = None
    failure: str = ""  # set when the problem is malformed
    skip_reason: str = ""  # set when the file is not a problem at all
    sort_key: tuple[int, int, str] = (0, 0, "")
    # Tried in order when the definition's reference fails (KernelBench: other sizes).
    fallbacks: tuple[OperatorDefinition, ...] = ()
    left_out: tuple[str, ...] = ()  # rows left out on reading, each with why


def label_of(path: Path, *, root: Path) -> str:
    """The path relative to the import folder, bytes of a name that are not UTF-8 as \\xNN."""
    return os.fsencode(path.relative_to(root)).decode("utf-8", errors="backslashreplace")


def require_utf8_name(path: Path, *, root: Path) -> None:
    """PostgreSQL stores only UTF-8 text, and the name goes into the report and the operator
    (whose origin_path holds MAX_PATH_CHARS)."""
    label = label_of(path, root=root)
    if label != str(path.relative_to(root)):
        raise ProblemError(f"{label}: the name is not UTF-8")
    if len(label) > MAX_PATH_CHARS:
        raise ProblemError(
            f"{label}: the path is {len(label)} characters, over the limit of {MAX_PATH_CHARS}"
        )


def fitted_name(name: str) -> str:
    """A problem's name as an operator version holds it: a file or folder name may be 255
    characters, OperatorVersion.name 200."""
    return Truncator(name).chars(MAX_NAME_CHARS)


def read_text(path: Path, *, root: Path) -> str:
    """A file's text, refused when it lies outside `root` (through a link), is too large, not
    UTF-8 or holds a NUL byte."""
    where = path.relative_to(root)
    try:
        if not path.resolve().is_relative_to(root.resolve()):  # KOPE_IMPORT_ROOTS hold
            raise ProblemError(f"{where}: a link to a file outside the folder being imported")
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):  # a FIFO blocks, a device never ends
            raise ProblemError(f"{where}: not a regular file")
        size = status.st_size
        if size > settings.KOPE_IMPORT_MAX_FILE_BYTES:
            raise ProblemError(
                f"{where}: {size} bytes is over the limit of "
                f"{settings.KOPE_IMPORT_MAX_FILE_BYTES} (KOPE_IMPORT_MAX_FILE_BYTES)"
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProblemError(f"{where}: missing") from None
    except UnicodeDecodeError as error:
        raise ProblemError(f"{where}: not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise ProblemError(f"{where}: cannot be read ({error.strerror})") from None
    if "\x00" in text:  # PostgreSQL stores no NUL in text
        raise ProblemError(f"{where}: holds a NUL byte (character {text.index(chr(0))})")
    return text


LEVEL_FOLDER = re.compile(r"^level[_-]?(\d+)$", re.IGNORECASE)


def level_from_path(path: Path) -> int | None:
    """The level a benchmark's `levelN` folder gives; levels above 3 count as advanced (3)."""
    for part in reversed(path.parts):
        match = LEVEL_FOLDER.match(part)
        if match:
            return min(max(int(match.group(1)), 1), 3)
    return None


# The first family whose keyword appears in the problem's name wins, so the order matters:
# "Gemm_Multiply_LeakyReLU" is a matmul with an epilogue, not an activation.
FAMILY_KEYWORDS: list[tuple[str, tuple[str, ...]]] = [
    ("attention", ("attention", "attn", "flash", "sdpa")),
    ("convolution", ("conv", "pool", "pooling", "deconv")),
    ("matmul", ("matmul", "gemm", "gemv", "bmm", "mm", "linear", "dense", "einsum")),
    ("normalization", ("norm", "softmax", "normalize", "normalization")),
    ("loss", ("loss", "entropy", "hinge", "kldiv", "mse", "nll", "huber")),
    ("scan", ("cumsum", "cumprod", "scan", "prefix")),
    ("activation", ("relu", "gelu", "sigmoid", "tanh", "swish", "silu", "elu", "selu", "mish",
                    "softplus", "softsign", "hardtanh", "hardsigmoid", "activation", "swiglu",
                    "glu")),
    ("reduction", ("sum", "mean", "max", "min", "argmax", "argmin", "reduce", "prod",
                   "logsumexp", "reduction")),
    ("data movement", ("transpose", "gather", "scatter", "concat", "cat", "index", "copy",
                       "permute", "reshape", "slice", "split", "stack", "pad", "repeat",
                       "embedding")),
]  # fmt: skip


def name_tokens(text: str) -> list[str]:
    """'19_ReLU' -> ['19', 'relu']; 'RMSNormQuant' -> ['rms', 'norm', 'quant']."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return [t.lower() for t in re.split(r"[^A-Za-z0-9]+", spaced) if t]


def _matches(token: str, keyword: str) -> bool:
    return token == keyword or (len(keyword) >= 4 and token.startswith(keyword))


def family_from_names(*names: str) -> str:
    # Both splits: 'RMSNorm' needs the camel-case one, 'ReLU' the plain one.
    plain = [t.lower() for name in names for t in re.split(r"[^A-Za-z0-9]+", name) if t]
    tokens = plain + [t for name in names for t in name_tokens(name)]
    for family, keywords in FAMILY_KEYWORDS:
        if any(_matches(t, k) for t in tokens for k in keywords):
            return family
    return "elementwise"


def slug_from_name(prefix: str, name: str) -> str:
    """'kb_l1', '19_ReLU' -> 'kb_l1_19_relu'; 'npu_l2', 'RMSNormQuant' -> 'npu_l2_rms_norm_quant'.

    Words split where a capital starts a lower-case word, so acronyms (ReLU, GeLU) stay whole.
    """
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    body = re.sub(r"[^a-z0-9]+", "_", words.lower()).strip("_") or "problem"
    return f"{prefix}_{body}"[:63].rstrip("_")


def leading_number(name: str) -> int:
    match = re.match(r"^(\d+)", name)
    return int(match.group(1)) if match else 0
