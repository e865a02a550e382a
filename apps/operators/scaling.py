"""How an importer shrinks a benchmark's GPU-scale sizes; shared by refrun (no dependencies).

A problem's constants are module-level ints and tuples of ints (`input_shape = (4096,)`).
Two ways to shrink them by a factor, tried in this order (importers/kernelbench.py):

- plain: every int of 9 and up (a size) times the factor; small ints (kernel 3, stride 2,
  groups 4) and tuples stay as they are.
- together: the sizes inside tuples too, so `input_shape` moves with `batch_size`; each size
  rounded down to a multiple of the small constants that divided it (channels stay divisible
  by groups), and never below the largest small constant it was not below (an input stays at
  least as large as the kernel). Equal sizes stay equal.
"""

from __future__ import annotations

import math

SIZE_CONSTANT_MIN = 9  # module-level ints above 8 are sizes; small ones (kernel 3, stride 2) stay

Constants = dict[str, int | list[int]]  # name -> an int, or a tuple's ints


def scaled_size(value: int, scale: float) -> int:
    if value < SIZE_CONSTANT_MIN:
        return value
    return max(1, int(value * scale))


def scaled_constants(constants: Constants, scale: float, *, together: bool) -> Constants:
    if not together:
        return {name: value if isinstance(value, list) else scaled_size(value, scale)
                for name, value in constants.items()}  # fmt: skip
    small = small_constants(constants)
    return {name: [_kept_together(v, scale, small) for v in value] if isinstance(value, list)
            else _kept_together(value, scale, small)
            for name, value in constants.items()}  # fmt: skip


def odd_constants(constants: Constants, scaled: Constants) -> Constants:
    """`scaled` (shrunk together from `constants`) with each size made odd where it need not
    stay a multiple of an even small constant; a kernel tuned to even sizes fails on it."""
    small = small_constants(constants)

    def odd(original: int, size: int) -> int:
        step = _step(original, small)
        if original < SIZE_CONSTANT_MIN or size % 2 or step % 2 == 0:
            return size
        return size + step

    result: Constants = {}
    for name, value in scaled.items():
        before = constants[name]
        if isinstance(value, list) and isinstance(before, list):
            result[name] = [odd(o, s) for o, s in zip(before, value, strict=True)]
        elif isinstance(value, int) and isinstance(before, int):
            result[name] = odd(before, value)
    return result


def small_constants(constants: Constants) -> set[int]:
    values = [v for value in constants.values()
              for v in (value if isinstance(value, list) else [value])]  # fmt: skip
    return {v for v in values if 1 < v < SIZE_CONSTANT_MIN}


def _step(value: int, small: set[int]) -> int:
    return math.lcm(*[d for d in small if value % d == 0])


def _kept_together(value: int, scale: float, small: set[int]) -> int:
    if value < SIZE_CONSTANT_MIN:
        return value
    step = _step(value, small)
    floor = max([d for d in small if d <= value], default=1)
    size = int(value * scale) // step * step
    if size < floor:
        size = -(-floor // step) * step  # the first multiple of step at or above the floor
    return max(size, step)
