"""The result cache's codec (plain_data.py): every value comes back as it went in, lists of scalars too."""

from __future__ import annotations

import math

import pytest

from trace_doctor import plain_data

VALUES = [
    [1, 2.5, "x", None, True],
    [1.0, float("nan"), 3.0],
    [float("inf"), -float("inf")],
    [[1, 2], (3, 4), {5}],
    [],
    {"a": [0.1] * 1000, "b": [1, float("nan")], 3: ["k"]},
]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("value", VALUES)
def test_a_value_comes_back_as_it_went_in(value):
    back = plain_data.loads(plain_data.dumps(value))
    assert _same(back, value)


def test_a_list_with_a_float_that_is_not_finite_keeps_its_tag():
    assert plain_data.encode([1.0, float("nan")]) == [1.0, {"$": "float", "v": "nan"}]
    # A list of plain scalars is written as it is, and a copy (the value is not aliased).
    value = [1, 2.0, "x"]
    encoded = plain_data.encode(value)
    assert encoded == value and encoded is not value
