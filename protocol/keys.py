"""Canonical entry keys: a key object in RFC 8785 (JSON Canonicalization Scheme) form.

`{"a":1,"b":2}`, `{"b":2,"a":1}` and `{"a":1.0,"b":2}` all canonicalise to `{"a":1,"b":2}`:
object members sorted by their UTF-16 code units, no insignificant white space, numbers in the
shortest form that round-trips (ECMAScript `Number.prototype.toString`), strings with only the
escapes JSON requires.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

__all__ = ["canonical_key", "canonical_json"]

_str = json.JSONEncoder(ensure_ascii=False).encode


def _number(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        raise ValueError("NaN and Infinity are not JSON numbers")
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    r = repr(x)  # shortest round-trip digits
    if "e" not in r:
        return r
    mantissa, exp = r.split("e")
    e = int(exp)
    if -7 < e < 21:  # ECMAScript writes these without an exponent
        return format(x, "f").rstrip("0").rstrip(".") if "." in format(x, "f") else format(x, "f")
    if mantissa.endswith(".0"):
        mantissa = mantissa[:-2]
    return f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def _sort_key(k: str) -> list[int]:
    return list(k.encode("utf-16-be"))


def canonical_json(value: Any) -> str:
    """The RFC 8785 text of a JSON value (dict, list, str, int, float, bool, None).

    Raises `ValueError` for NaN/Infinity or an integer beyond a double's range, and `TypeError` for a non-JSON value or non-string key.
    """
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, int):
        if abs(value) < 2**53:
            return str(value)
        try:
            return _number(float(value))
        except OverflowError:  # JSON allows it; no IEEE double (the key's number type) holds it
            raise ValueError("integer out of the range of a JSON number (a double)") from None
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict):
        parts = []
        for k in sorted(value, key=_sort_key):
            if not isinstance(k, str):
                raise TypeError("object keys must be strings")
            parts.append(f"{_str(k)}:{canonical_json(value[k])}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


_sorted_encode = msgspec.json.Encoder(order="sorted").encode
_SAFE_INT = 2**53


def _flat_and_plain(key: dict[Any, Any]) -> bool:
    """True for the common key whose canonical form is its sorted compact JSON: printable-ASCII
    member names, values that are printable-ASCII strings, safe integers, booleans or null."""
    for k, v in key.items():
        if type(k) is not str or not (k.isascii() and k.isprintable()):
            return False
        t = type(v)
        if t is str:
            if not (v.isascii() and v.isprintable()):
                return False
        elif t is int:
            if not -_SAFE_INT < v < _SAFE_INT:
                return False
        elif v is not None and t is not bool:
            return False
    return True


def canonical_key(key: Any) -> bytes:
    """The canonical UTF-8 bytes of an entry key. Raises `ValueError` unless a non-empty object.

    A flat key of plain values (the usual one) is encoded by msgspec with sorted members, which
    is its RFC 8785 form; any other goes through `canonical_json`.
    """
    if not isinstance(key, dict) or not key:
        raise ValueError("key must be a non-empty JSON object")
    if _flat_and_plain(key):
        return _sorted_encode(key)
    return canonical_json(key).encode()
