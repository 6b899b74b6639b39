"""Values as plain JSON data and back, for what the result cache keeps: data is read, never code run.

A pickle names the functions that rebuild it, so whoever can write a cache entry chooses what runs when
it is read. Here an entry is JSON: lists, numbers, strings and objects, plus a few tagged forms for
what JSON has no word for (tuples, sets, non-string keys, NaN-safe floats, numpy scalars, dates),
tables as Arrow IPC, and the result objects of an analysis by the name of their class. A class is
looked up in a fixed registry (`known_classes`) and rebuilt by setting its fields, so reading an entry
calls no function that the entry names. Anything else in an entry (an unknown tag or class, a field
the class lacks) raises ValueError: the caller treats the entry as a miss.

    >>> decode(json.loads(json.dumps(encode({"a": (1, 2.5), 3: {"x"}}))))
    {'a': (1, 2.5), 3: {'x'}}
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import io
import itertools
import json
import math
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

import numpy as np
import polars as pl

TAG = "$"
# numpy scalars an analysis may hold (a statistic computed with numpy): rebuilt by dtype name only.
NUMPY_SCALARS = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"}
)


# Values that are their own plain form (a float only when finite).
_SCALARS = frozenset({type(None), bool, int, str, float})


class NotPlainData(ValueError):
    """A value the codec has no form for (encoding), or an entry that is not one it wrote (decoding)."""


@cache
def known_classes() -> Mapping[str, type]:
    """The classes an entry may name: the result objects an Analysis is made of, by qualified name."""
    from trace_doctor import decision, model
    from trace_doctor.ingest.parsers import launches
    from trace_doctor.policy import Policy, SharedPolicy, rule_policies
    from trace_doctor.policy.live import WatchPolicy

    classes: list[type] = [Policy, SharedPolicy, WatchPolicy, *rule_policies().values()]
    for module in (model, decision, launches):
        classes += [
            value
            for value in vars(module).values()
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module.__name__
        ]
    return MappingProxyType({_name(cls): cls for cls in classes})


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def encode(value: Any) -> Any:
    """`value` as JSON-able data; NotPlainData when something in it has no plain form."""
    return _encode(value, {})


def _plain_scalars(items: list) -> bool:
    """Whether a list holds only plain scalars (a float that is not finite still needs its tag). The
    types are gathered and the floats tested by C loops: an analysis holds tens of thousands of values."""
    types = set(map(type, items))
    if not types <= _SCALARS:
        return False
    if float not in types:
        return True
    if len(types) == 1:
        return all(map(math.isfinite, items))
    return all(math.isfinite(item) for item in items if type(item) is float)


def _encode(value: Any, seen: dict[int, Any]) -> Any:
    """encode, with `seen`: the form of each result object already encoded in this value, by identity (the
    verdict lists the findings the analysis holds: each is encoded once)."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {TAG: "float", "v": repr(value)}
    if kind is list:
        # A per-step series is most of an analysis's values: a list of plain scalars is its own form, and so
        # is a list of such lists (a finding's time ranges, a pair per step).
        if _plain_scalars(value):
            return list(value)
        if value and set(map(type, value)) == {list} and _plain_scalars(list(itertools.chain.from_iterable(value))):
            return [list(item) for item in value]
        return [_encode(item, seen) for item in value]
    if kind is dict:
        if all(type(key) is str for key in value) and TAG not in value:
            return {key: _encode(item, seen) for key, item in value.items()}
        return {TAG: "dict", "v": [[_encode(key, seen), _encode(item, seen)] for key, item in value.items()]}
    if kind is MappingProxyType:
        return {TAG: "mapping", "v": _encode(dict(value), seen)}
    if kind in (tuple, set, frozenset):
        return {TAG: kind.__name__, "v": [_encode(item, seen) for item in value]}
    if kind is pl.DataFrame:
        return {TAG: "frame", "v": _ipc(value)}
    if kind is pl.Series:
        return {TAG: "series", "v": _ipc(value.to_frame())}
    if kind in (datetime.datetime, datetime.date):
        return {TAG: kind.__name__, "v": value.isoformat()}
    if isinstance(value, np.generic) and value.dtype.name in NUMPY_SCALARS:
        return {TAG: "numpy", "dtype": value.dtype.name, "v": _encode(value.item(), seen)}
    if dataclasses.is_dataclass(value) and known_classes().get(_name(kind)) is kind:
        # Kept with the object itself, so its id is not reused by another while `seen` lives.
        done = seen.get(id(value))
        if done is not None and done[0] is value:
            return done[1]
        state = (
            vars(value)
            if hasattr(value, "__dict__")
            else {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        )
        form = {TAG: "object", "class": _name(kind), "v": {key: _encode(item, seen) for key, item in state.items()}}
        seen[id(value)] = (value, form)
        return form
    raise NotPlainData(f"no plain form for {kind.__module__}.{kind.__qualname__}")


def _ipc(frame: pl.DataFrame) -> str:
    out = io.BytesIO()
    frame.write_ipc(out, compression="lz4")
    return base64.b64encode(out.getvalue()).decode("ascii")


def _frame(text: Any) -> pl.DataFrame:
    if not isinstance(text, str):
        raise NotPlainData("a table is not base64 text")
    return pl.read_ipc(io.BytesIO(base64.b64decode(text, validate=True)))


def decode(data: Any) -> Any:
    """The value `encode` made `data` from; NotPlainData when `data` is not such a value."""
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [decode(item) for item in data]
    if kind is not dict:
        raise NotPlainData(f"unexpected {kind.__name__}")
    if TAG not in data:
        return {key: decode(item) for key, item in data.items()}
    return _tagged(data)


def _tagged(data: dict[str, Any]) -> Any:
    tag, raw = data.get(TAG), data.get("v")
    if tag == "float" and raw in ("nan", "inf", "-inf"):
        return float(raw)
    if tag in ("tuple", "set", "frozenset") and type(raw) is list:
        items = [decode(item) for item in raw]
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict" and type(raw) is list and all(type(pair) is list and len(pair) == 2 for pair in raw):
        return {decode(key): decode(item) for key, item in raw}
    if tag == "mapping":
        inner = decode(raw)
        if type(inner) is not dict:
            raise NotPlainData("a mapping that is not a dict")
        return MappingProxyType(inner)
    if tag == "frame":
        return _frame(raw)
    if tag == "series":
        frame = _frame(raw)
        if frame.width != 1:
            raise NotPlainData("a series of several columns")
        return frame.to_series()
    if tag == "datetime" and type(raw) is str:
        return datetime.datetime.fromisoformat(raw)
    if tag == "date" and type(raw) is str:
        return datetime.date.fromisoformat(raw)
    if tag == "numpy" and data.get("dtype") in NUMPY_SCALARS:
        return np.dtype(data["dtype"]).type(decode(raw))
    if tag == "object" and type(raw) is dict:
        return _rebuilt(data.get("class"), raw)
    raise NotPlainData(f"unknown form {tag!r}")


def _rebuilt(name: Any, state: dict[str, Any]) -> Any:
    """An instance of a known class with exactly its fields set, no method of it called (a frozen
    dataclass is filled as pickle fills one)."""
    cls = known_classes().get(name) if isinstance(name, str) else None
    if cls is None:
        raise NotPlainData(f"unknown class {name!r}")
    expected = {f.name for f in dataclasses.fields(cls)}
    if not set(state) <= expected | set(getattr(cls, "__annotations__", {})) or not expected <= set(state):
        raise NotPlainData(f"{name}: fields {sorted(state)} are not {sorted(expected)}")
    instance = object.__new__(cls)
    for key, item in state.items():
        object.__setattr__(instance, key, decode(item))
    return instance


def dumps(value: Any) -> bytes:
    """`value` as one JSON document (UTF-8)."""
    return json.dumps(encode(value), ensure_ascii=True, separators=(",", ":")).encode("ascii")


def loads(raw: bytes) -> Any:
    """The value `dumps` wrote; NotPlainData (a ValueError) for anything else."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise NotPlainData(f"not JSON: {exc}") from exc
    return decode(data)
