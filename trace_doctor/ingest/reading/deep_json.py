"""A JSON decoder without recursion, for documents nested deeper than orjson or json accept.

pyinstrument profiles of deep recursion nest one object per stack frame; orjson stops at depth
1024 and Python's json hits the recursion limit. This decoder keeps its own stack, so depth costs
memory only. It is slower, so callers use it only when the fast decoders refuse a document.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<punct>[{}\[\],:])'
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<literal>true|false|null|NaN|-?Infinity))",
    re.S,
)
_LITERALS: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}

# Parser states: what the next token may be.
_VALUE = "value"  # any value (document start, after ':' or after ',' in an array)
_VALUE_OR_CLOSE = "value-or-close"  # just after '['
_KEY = "key"  # after ',' in an object
_KEY_OR_CLOSE = "key-or-close"  # just after '{'
_COLON = "colon"
_NEXT = "next"  # after a complete value: ',' or a closing bracket (or the end)


class DeepJSONError(ValueError):
    """The text is not one valid JSON document."""


def loads_deep(text: str) -> Any:
    """Decode one JSON document of any nesting depth; raise DeepJSONError if it is not valid."""
    stack: list[list[Any]] = []  # open containers as [container, pending key]
    result: Any = None
    complete = False  # the top-level value has been read
    state = _VALUE
    pos = 0
    while True:
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos:].strip():
                raise DeepJSONError(f"unexpected character at offset {pos}")
            break
        pos = match.end()
        kind = match.lastgroup or ""
        token = match.group(kind)
        at = match.start(kind)
        if complete:
            raise DeepJSONError(f"extra data at offset {at}")
        if kind == "punct" and token in "]}":
            allowed = _NEXT if stack else None
            closing_empty = (token == "]" and state == _VALUE_OR_CLOSE) or (token == "}" and state == _KEY_OR_CLOSE)
            if (
                not stack
                or (state != allowed and not closing_empty)
                or isinstance(stack[-1][0], dict) != (token == "}")
            ):
                raise DeepJSONError(f"unexpected {token!r} at offset {at}")
            value = stack.pop()[0]
        elif kind == "punct" and token == ",":
            if state != _NEXT or not stack:
                raise DeepJSONError(f"unexpected ',' at offset {at}")
            state = _KEY if isinstance(stack[-1][0], dict) else _VALUE
            continue
        elif kind == "punct" and token == ":":
            if state != _COLON:
                raise DeepJSONError(f"unexpected ':' at offset {at}")
            state = _VALUE
            continue
        elif state in (_KEY, _KEY_OR_CLOSE):
            if kind != "string":
                raise DeepJSONError(f"object key must be a string at offset {at}")
            stack[-1][1] = json.loads(token)
            state = _COLON
            continue
        elif state not in (_VALUE, _VALUE_OR_CLOSE):
            raise DeepJSONError(f"unexpected {token[:20]!r} at offset {at}")
        elif kind == "punct":  # '{' or '['
            stack.append([{} if token == "{" else [], None])
            state = _KEY_OR_CLOSE if token == "{" else _VALUE_OR_CLOSE
            continue
        else:
            value = _LITERALS[token] if kind == "literal" else json.loads(token)
        # A complete value: attach it to its container, or it is the whole document.
        if not stack:
            result, complete = value, True
        elif isinstance(stack[-1][0], dict):
            stack[-1][0][stack[-1][1]] = value
        else:
            stack[-1][0].append(value)
        state = _NEXT
    if not complete:
        raise DeepJSONError("document ends inside a value (truncated)")
    return result


def dumps_deep(value: Any, *, sort_keys: bool = False) -> str:
    """JSON text of a decoded value of any nesting depth (non-finite floats as NaN/Infinity)."""
    parts: list[str] = []
    # Work items: a value to write, or a literal piece of text (the commas and closing brackets).
    pending: list[tuple[bool, Any]] = [(False, value)]
    while pending:
        is_text, item = pending.pop()
        if is_text:
            parts.append(item)
        elif isinstance(item, dict):
            keys = sorted(item, key=str) if sort_keys else list(item)
            parts.append("{")
            pending.append((True, "}"))
            for i, key in reversed(list(enumerate(keys))):
                pending.append((False, item[key]))
                pending.append((True, ("" if i == 0 else ", ") + json.dumps(str(key)) + ": "))
        elif isinstance(item, (list, tuple)):
            parts.append("[")
            pending.append((True, "]"))
            for i, element in reversed(list(enumerate(item))):
                pending.append((False, element))
                if i:
                    pending.append((True, ", "))
        else:
            parts.append(
                json.dumps(item) if isinstance(item, (str, int, float, bool)) or item is None else json.dumps(str(item))
            )
    return "".join(parts)


def cap_depth(value: Any, max_depth: int) -> tuple[Any, int]:
    """The value with every container nested deeper than `max_depth` replaced by its JSON text.

    Consumers that recurse (copy.deepcopy, renderers walking a config) then never meet more than
    `max_depth` levels; nothing is lost, the deep part is text. Returns (value, containers replaced).
    """
    if not isinstance(value, (dict, list)):
        return value, 0
    replaced = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        container, depth = pending.pop()
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in list(items):
            if not isinstance(item, (dict, list)):
                continue
            if depth >= max_depth:
                container[key] = dumps_deep(item)
                replaced += 1
            else:
                pending.append((item, depth + 1))
    return value, replaced
