"""Checks that hold for every value of a request body, whatever field it is in.

Some values cannot be taken by any field: a number that does not fit a 64-bit float (JSON
allows 400-digit integers, `float()` raises on them), a non-finite number (`NaN`,
`Infinity`, `1e999`), a string holding a lone UTF-16 surrogate (`"\\udcff"` is valid JSON
but not Unicode text: tokenizers and encoders raise on it), and nesting deeper than any
request needs. Refusing them once, over the whole decoded body, is what keeps them away from
every field's own validation, the chat template and the tokenizer, including fields added
later. Field-specific rules (types, ranges) stay in `protocol`.

The walk is iterative (no recursion limit to hit) and linear in the body's size.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from reference_engine.server.errors import APIError, bad_request

# body (1) > messages (2) > message (3) > content (4) > part (5) is the deepest valid request;
# the margin leaves room for extensions clients send and this server ignores.
MAX_DEPTH = 32
_FLOAT_MAX = sys.float_info.max
Path = tuple[Any, ...]  # (parent path, key) pairs, nested: cheap to extend, formatted only on error


def check_values(body: dict[str, Any]) -> None:
    """Raise a 400 `APIError` naming the first value no field can take (see the module doc).

    `param` is the top-level field the value sits in; the message gives the full path
    (`messages[0].content[1].text`).
    """
    stack: list[tuple[Any, Path | None, int]] = [(body, None, 1)]
    while stack:
        value, path, depth = stack.pop()
        kind = type(value)
        if kind is str:
            if not _is_text(value):
                raise _refuse(path, "contains a lone UTF-16 surrogate, which is not valid Unicode text")
        elif kind is int:
            if not -_FLOAT_MAX <= value <= _FLOAT_MAX:
                raise _refuse(path, "is a number too large for a 64-bit float")
        elif kind is float:
            if not math.isfinite(value):
                raise _refuse(path, f"must be a finite number, got {value}")
        elif kind is dict or kind is list:
            if depth >= MAX_DEPTH:
                raise _refuse(path, f"is nested deeper than {MAX_DEPTH} levels")
            items = value.items() if kind is dict else enumerate(value)
            for key, item in items:
                if kind is dict and not _is_text(key):
                    raise _refuse((path, key), "is a field name with a lone UTF-16 surrogate")
                stack.append((item, (path, key), depth + 1))


def _is_text(s: str) -> bool:
    """False for a lone surrogate, the only thing a decoded JSON string can hold that UTF-8
    cannot encode. ASCII (the usual case) is answered without encoding."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _keys(path: Path | None) -> list[Any]:
    keys: list[Any] = []
    while path is not None:
        path, key = path
        keys.append(key)
    return keys[::-1]


def _shown(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:64]


def _refuse(path: Path | None, problem: str) -> APIError:
    keys = _keys(path)
    if not keys:
        return bad_request(f"The request body {problem}.")
    where = _shown(keys[0]) + "".join(f"[{k}]" if isinstance(k, int) else f".{_shown(k)}" for k in keys[1:])
    return bad_request(f"'{where}' {problem}.", _shown(keys[0]))
