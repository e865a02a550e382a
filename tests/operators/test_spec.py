"""Operator specs (operator.toml) are parsed strictly: every problem is named with its place."""

from __future__ import annotations

import pytest

from apps.operators.builtin_suite import read_builtin_suite
from apps.operators.spec import SpecError, parse_operator_toml, spec_from_json

GOOD = """
slug = "scale_rows"
name = "Scale rows"
family = "elementwise"
level = 1
description = "y = alpha * x"

[[inputs]]
name = "x"
dtype = "float32"
shape = ["rows", "cols"]

[[outputs]]
name = "y"
dtype = "float32"
shape = ["rows", "cols"]

[[attributes]]
name = "alpha"
type = "float"
default = 2.0

[[cases]]
id = "small"
params = { rows = 3, cols = 5, alpha = -1.5 }

[[cases]]
id = "big"
params = { rows = 300, cols = 500 }
timing = true
"""


def test_a_good_spec_parses_with_defaults() -> None:
    spec = parse_operator_toml(GOOD, where="scale_rows/operator.toml")
    assert (spec.slug, spec.family, spec.level) == ("scale_rows", "elementwise", 1)
    assert (spec.max_abs, spec.max_rel) == (1e-3, 1e-3)
    assert [c.case_id for c in spec.cases] == ["small", "big"]
    assert spec.cases[1].timing and not spec.cases[0].timing
    assert spec.attribute_values(spec.cases[0].params) == [-1.5]
    assert spec.attribute_values(spec.cases[1].params) == [2.0]
    assert spec.outputs[0].resolved_shape(spec.cases[0].params) == [3, 5]


def test_a_spec_survives_the_round_trip_through_json() -> None:
    spec = parse_operator_toml(GOOD, where="x")
    assert spec_from_json(spec.as_json()) == spec


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('family = "elementwise"', 'family = "magic"'), "family 'magic' is not one of"),
        (("level = 1", "level = 5"), "level 5 is not 1, 2 or 3"),
        (('dtype = "float32"\nshape = ["rows", "cols"]\n\n[[outputs]]',
          'dtype = "float31"\nshape = ["rows", "cols"]\n\n[[outputs]]'), "unknown dtype 'float31'"),
        (("params = { rows = 3, cols = 5, alpha = -1.5 }", "params = { rows = 3 }"),
         "case 'small' gives no value for cols"),
        (('id = "big"', 'id = "small"'), "test case ids must be unique"),
        (('slug = "scale_rows"', 'slug = "Scale Rows"'), "must be lowercase"),
        (('name = "Scale rows"\n', ""), "missing key 'name'"),
        (("level = 1", "level = [1"), "not valid TOML"),
    ],
)  # fmt: skip
def test_a_bad_spec_is_refused_with_the_reason(change: tuple[str, str], message: str) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(SpecError) as raised:
        parse_operator_toml(text, where="scale_rows/operator.toml")
    assert str(raised.value).startswith("scale_rows/operator.toml: ")
    assert message in str(raised.value)


def test_the_builtin_suite_is_what_the_issue_asks_for() -> None:
    """At least 24 operators, 8 families, all three levels, 8+ cases, one timed case each."""
    folders = read_builtin_suite()
    specs = [f.spec for f in folders]
    assert len(specs) >= 24
    assert len({s.family for s in specs}) >= 8
    assert {s.level for s in specs} == {1, 2, 3}
    for spec in specs:
        assert len(spec.cases) >= 8, spec.slug
        assert sum(c.timing for c in spec.cases) == 1, spec.slug
        assert "int kope_kernel(" in next(f.naive_source for f in folders if f.spec is spec)
    slugs = {s.slug for s in specs}
    # Where naive parallelization is wrong, fused ones, and compute-bound ones:
    assert {"cumsum", "argmax_rows", "row_sum"} <= slugs
    assert {"add_rmsnorm", "scaled_softmax", "matmul_bias_relu"} <= slugs
    assert {"gemm", "conv2d", "attention"} <= slugs
    levels = [s.level for s in specs]
    assert levels == sorted(levels), "the suite runs easy first"
