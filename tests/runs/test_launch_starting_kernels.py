"""Starting kernels in the launch form: pasted or uploaded for a chosen operator, stored by
hash as the API stores them, and each mistake said under the row's field at fault."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.devices.models import KernelSource
from apps.operators.builtin_suite import BUILTIN_DIR
from apps.runs.models import OptimizationSession
from apps.runs.services import MAX_UPLOAD_CHARS
from tests.factories import stored_builtin

MINE = "/* mine */\n" + (BUILTIN_DIR / "relu" / "naive.c").read_text()
LAUNCH = {"operators": ["relu", "gemm"], "policy": "offline", "memory_mode": "off",
          "rounds": "2", "plateau": "2", "repeats": "20", "seed": "0"}  # fmt: skip


@pytest.fixture
def launch(team: Team, client_for: Callable[[Role], Client]) -> Callable[..., Any]:
    stored_builtin("relu")
    stored_builtin("gemm")
    client = client_for(Role.ENGINEER)
    return lambda **fields: client.post(f"/t/{team.slug}/sessions/new/", {**LAUNCH, **fields})


def starts(session: OptimizationSession) -> dict[str, str | None]:
    return {o["slug"]: o["start_source_sha256"] for o in session.config["operators"]}


def test_a_pasted_starting_kernel_is_the_one_its_operator_starts_from(
    launch: Callable[..., Any],
) -> None:
    response = launch(kernel_operator_0="relu", kernel_source_0=MINE)

    assert response.status_code == 302
    session = OptimizationSession.objects.get()
    assert starts(session) == {"relu": KernelSource.digest_of(MINE), "gemm": None}
    assert KernelSource.objects.get(sha256=starts(session)["relu"]).text == MINE


def test_an_uploaded_starting_kernel_in_a_later_row_is_stored_as_well(
    launch: Callable[..., Any],
) -> None:
    upload = SimpleUploadedFile("gemm.c", MINE.encode())
    launch(kernel_operator_2="gemm", kernel_file_2=upload)
    assert starts(OptimizationSession.objects.get())["gemm"] == KernelSource.digest_of(MINE)


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"kernel_source_0": MINE}, "kernel_operator_0", "Pick the operator this kernel starts."),
        ({"kernel_operator_1": "relu"}, "kernel_source_1",
         "Paste or upload a kernel for relu, or set its operator back to none."),
        ({"kernel_operator_0": "relu", "kernel_source_0": MINE, "kernel_operator_1": "relu",
          "kernel_source_1": MINE}, "kernel_operator_1", "relu has a kernel above already."),
        ({"operators": ["gemm"], "kernel_operator_0": "relu", "kernel_source_0": MINE},
         "kernel_operator_0", "relu is not among the operators picked above."),
        ({"kernel_operator_0": "relu", "kernel_file_0": SimpleUploadedFile("k.c", b"\xff\xfe")},
         "kernel_file_0", "k.c is not UTF-8 text (byte 0 cannot be read)."),
        ({"kernel_operator_0": "relu", "kernel_source_0": MINE,
          "kernel_file_0": SimpleUploadedFile("k.c", b"int x;")},
         "kernel_file_0", "Paste a kernel or upload a file, not both."),
    ],
)  # fmt: skip
def test_a_starting_kernel_row_that_is_wrong_is_refused_under_its_field(
    launch: Callable[..., Any], fields: dict[str, Any], field: str, reason: str
) -> None:
    response = launch(**fields)

    text = response.content.decode()
    assert response.status_code == 400
    errors = text[text.index(f'id="id_{field}_error"') :]
    assert reason.replace("'", "&#x27;") in errors[: errors.index("</ul>")]
    assert not OptimizationSession.objects.exists()


def test_a_starting_kernel_over_the_apis_limit_is_refused_as_the_api_refuses_it(
    launch: Callable[..., Any],
) -> None:
    response = launch(kernel_operator_0="relu", kernel_source_0="x" * (MAX_UPLOAD_CHARS + 1))

    assert response.status_code == 400
    assert f"starting kernels over {MAX_UPLOAD_CHARS} characters: relu" in response.content.decode()
    assert not OptimizationSession.objects.exists()
