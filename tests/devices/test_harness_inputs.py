"""What the timing harness gives a kernel's timed calls and its last call (no database)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from apps.devices.cpu_c.harness import Renewal, fresh_draw, last_call, timed_inputs
from apps.devices.cpu_c.protocol import KEPT, RENEWED
from apps.operators.refrun import Reference

SHAPES = [(4, 3), (3, 5)]


def judges_inputs(folder: Path) -> list[dict[str, Any]]:
    metas = []
    for i, shape in enumerate(SHAPES):
        path = folder / f"c0s0.in{i}"
        np.random.default_rng(i).standard_normal(shape).astype(np.float32).tofile(path)
        metas.append({"file": str(path), "dtype": "float32", "shape": list(shape)})
    return metas


def reference_drawing(make: Any) -> Reference:
    return Reference(make, lambda inputs, params: [inputs[0] @ inputs[1]])


def run_with(metas: list[dict[str, Any]]) -> dict[str, Any]:
    return {"params": {}, "scalars": [], "inputs": metas}


def random_draw(params: dict[str, Any], generator: Any) -> list[Any]:
    import torch

    return [torch.randn(*shape, generator=generator) for shape in SHAPES]


def drawn_inputs(reference: Reference, run: dict[str, Any]) -> tuple[list[np.ndarray], bool]:
    return timed_inputs(fresh_draw(reference, run), run)


def test_timed_calls_get_a_fresh_draw_of_the_judges_shapes(tmp_path: Path) -> None:
    metas = judges_inputs(tmp_path)

    inputs, fresh = drawn_inputs(reference_drawing(random_draw), run_with(metas))

    assert fresh
    assert [a.shape for a in inputs] == SHAPES and all(a.dtype == np.float32 for a in inputs)
    assert not np.array_equal(inputs[0], np.fromfile(metas[0]["file"], np.float32).reshape(4, 3))


def test_a_draw_unlike_the_judges_falls_back_to_a_copy_of_them(tmp_path: Path) -> None:
    import torch

    metas = judges_inputs(tmp_path)
    wrong_shapes = reference_drawing(lambda params, generator: [torch.zeros(2, 2)])

    inputs, fresh = drawn_inputs(wrong_shapes, run_with(metas))

    assert not fresh
    assert np.array_equal(inputs[1], np.fromfile(metas[1]["file"], np.float32).reshape(3, 5))


def test_each_renewal_draws_new_contents_into_the_same_buffers(tmp_path: Path) -> None:
    metas = judges_inputs(tmp_path)
    reference, run = reference_drawing(random_draw), run_with(metas)
    inputs, _ = drawn_inputs(reference, run)
    renewal = Renewal(reference, run, inputs, budget_s=60.0, first_draw_s=0.0)
    seen = [a.copy() for a in inputs]

    statuses = [renewal(), renewal()]

    assert statuses == [RENEWED, RENEWED]
    assert not np.array_equal(inputs[0], seen[0]) and not np.array_equal(inputs[1], seen[1])
    assert [a.shape for a in inputs] == SHAPES


def test_renewal_stops_once_draws_cost_more_than_the_budget_on_average(tmp_path: Path) -> None:
    metas = judges_inputs(tmp_path)
    reference, run = reference_drawing(random_draw), run_with(metas)
    inputs, _ = drawn_inputs(reference, run)
    slow_once = Renewal(reference, run, inputs, budget_s=1.0, first_draw_s=0.9)
    expensive = Renewal(reference, run, inputs, budget_s=1.0, first_draw_s=3.0)

    # 0.9 s, then draws of a millisecond: the mean stays within the budget.
    assert [slow_once(), slow_once(), slow_once()] == [RENEWED] * 3
    kept = [a.copy() for a in inputs]
    assert [expensive(), expensive()] == [KEPT, KEPT]
    assert all(np.array_equal(a, b) for a, b in zip(inputs, kept, strict=True))


class Remembering:
    """A kernel call that copies the answer it gave first, whatever its inputs hold now."""

    def __init__(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        self.arrays_in, self.arrays_out = inputs, outputs
        self.answer: np.ndarray | None = None

    def __call__(self) -> int:
        if self.answer is None:
            self.answer = self.arrays_in[0] @ self.arrays_in[1]
        self.arrays_out[0][...] = self.answer
        return 0


def test_the_last_call_sees_the_judges_inputs_in_the_timed_buffers(tmp_path: Path) -> None:
    metas = judges_inputs(tmp_path)
    inputs, fresh = drawn_inputs(reference_drawing(random_draw), run_with(metas))
    call = Remembering(inputs, [np.empty((4, 5), np.float32)])
    last = [np.empty((4, 5), np.float32)]
    call()  # a timed call

    assert last_call(call, metas, last, fresh=fresh) == 0  # type: ignore[arg-type]

    judged = [np.fromfile(m["file"], np.float32).reshape(m["shape"]) for m in metas]
    assert all(a is b for a, b in zip(call.arrays_in, inputs, strict=True))  # same addresses
    assert np.array_equal(inputs[0], judged[0])
    assert not np.allclose(last[0], judged[0] @ judged[1])  # the remembered answer shows


def test_without_fresh_contents_the_last_call_starts_from_nan(tmp_path: Path) -> None:
    metas = judges_inputs(tmp_path)
    outputs = [np.zeros((4, 5), np.float32)]
    seen: list[np.ndarray] = []

    class Looking(Remembering):
        def __call__(self) -> int:
            seen.append(self.arrays_out[0].copy())
            return 0

    call = Looking([np.empty(s, np.float32) for s in SHAPES], outputs)
    last_call(call, metas, [np.empty((4, 5), np.float32)], fresh=False)  # type: ignore[arg-type]

    assert np.isnan(seen[-1]).all()  # a kernel that writes nothing is caught, as before
