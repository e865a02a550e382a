"""The built-in suite: one folder per operator under apps/operators/builtin/.

Each folder holds the cpu-c starting kernel (naive.c) and, for the level-1 operators, a Triton
one (naive_triton.py) for the triton target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from apps.operators.definitions import OperatorDefinition
from apps.operators.spec import OperatorSpec, SpecError, parse_operator_toml

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
BUILTIN_SUITE_SLUG = "cpu-builtin"
BUILTIN_TARGET = "cpu-c"
TRITON_TARGET = "triton"
TRITON_KERNEL = "naive_triton.py"


@dataclass(frozen=True)
class OperatorFolder:
    spec: OperatorSpec
    reference_source: str
    naive_source: str
    triton_source: str = ""  # naive_triton.py, where the folder has one


def read_operator_folder(folder: Path) -> OperatorFolder:
    where = f"{folder.name}/operator.toml"
    try:
        spec = parse_operator_toml((folder / "operator.toml").read_text(), where=where)
        reference = (folder / "reference.py").read_text()
        naive = (folder / "naive.c").read_text()
    except OSError as error:
        raise SpecError(f"{folder.name}: cannot read {Path(str(error.filename)).name}") from None
    if spec.slug != folder.name:
        raise SpecError(f"{where}: slug {spec.slug!r} differs from the folder name")
    triton = folder / TRITON_KERNEL
    return OperatorFolder(spec, reference, naive, triton.read_text() if triton.exists() else "")


def builtin_folders() -> list[Path]:
    return sorted(p for p in BUILTIN_DIR.iterdir() if (p / "operator.toml").exists())


def read_builtin_suite() -> list[OperatorFolder]:
    """Every built-in operator, easy first: by level, then the folder's declared order."""
    folders = [read_operator_folder(p) for p in builtin_folders()]
    return sorted(folders, key=lambda f: (f.spec.level, f.spec.order, f.spec.slug))


def builtin_definition(folder: OperatorFolder) -> OperatorDefinition:
    return OperatorDefinition(
        spec=folder.spec,
        reference_kind="kope",
        reference_source={"reference": folder.reference_source},
        origin="builtin",
        origin_path=f"apps/operators/builtin/{folder.spec.slug}",
        starting_kernels=starting_kernels(folder),
    )


def starting_kernels(folder: OperatorFolder) -> dict[str, str]:
    kernels = {BUILTIN_TARGET: folder.naive_source}
    if folder.triton_source:
        kernels[TRITON_TARGET] = folder.triton_source
    return kernels
