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


def test_a_list_of_pairs_is_written_as_it_is_unless_one_needs_a_tag():
    # A finding's time ranges: a pair per step, most of a cached analysis's values.
    pairs = [[float(i), i + 0.5] for i in range(1000)]
    encoded = plain_data.encode(pairs)
    assert encoded == pairs and encoded[0] is not pairs[0]
    # One pair with an infinite end, or a tuple among the lists: every item in its own form.
    assert plain_data.encode([[1.0, 2.0], [3.0, float("inf")]]) == [[1.0, 2.0], [3.0, {"$": "float", "v": "inf"}]]
    mixed = plain_data.loads(plain_data.dumps([[1, 2], (3, 4)]))
    assert mixed == [[1, 2], (3, 4)] and type(mixed[1]) is tuple


def test_an_object_held_twice_is_written_twice_and_comes_back_equal():
    from trace_doctor.model import Finding

    finding = Finding(rule="r", code="TD1", severity="warning", title="t", message="m", fix="f", steps=[1, 2])
    other = Finding(rule="s", code="TD2", severity="info", title="u", message="n", fix="g")
    value = {"findings": [finding, other], "notes": [finding]}
    encoded = plain_data.encode(value)
    # Encoded once: the same form in both places (the verdict's findings cost nothing more to write).
    assert encoded["notes"][0] is encoded["findings"][0] and encoded["findings"][0] != encoded["findings"][1]
    # A later call encodes afresh: nothing of this call's forms is reused.
    assert plain_data.encode(value)["notes"][0] is not encoded["notes"][0]
    back = plain_data.loads(plain_data.dumps(value))
    assert back["notes"][0] == back["findings"][0] == finding and back["findings"][1] == other
