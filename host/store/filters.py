"""Value filters, key prefixes and key paths of the store extensions, the same on every backend.

A retrieve's `filter` is parsed here into `Condition`s (a path into the entry's content, an
operator, a JSON value); `key_prefix` into `KeyPrefix`es. Both backends translate them to SQL
(`host/store/sqlite/filters.py`, `host/store/postgres/filters.py`); `matches` evaluates them
in Python for the working tier. Every bound of a filter is a constant here.

Rules (docs/protocol.md, "Store extensions"): a condition holds only when the field exists and
has the value's JSON type (integers and reals are one type, numbers); `$eq`/`$ne` take any JSON
value, the orderings (`$gt`, `$gte`, `$lt`, `$lte`) a number or a string. An object given
without operators is a nested filter on its members: `{"a": {"b": 1}}` is `{"a.b": 1}`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.codec import DOUBLE_LIMIT, numbers_fit
from protocol.names import is_member

__all__ = [
    "Condition",
    "FilterError",
    "KeyPrefix",
    "MAX_CONDITIONS",
    "MAX_DEPTH",
    "MAX_PREFIX",
    "OPERATORS",
    "has_nul",
    "json_type",
    "matches",
    "parse_filter",
    "parse_key_prefix",
    "path_matches",
    "select_paths",
]

OPERATORS: tuple[str, ...] = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
ORDERINGS: frozenset[str] = frozenset(("$gt", "$gte", "$lt", "$lte"))
MAX_CONDITIONS = 32  # conditions in one filter (after nested objects are flattened)
MAX_DEPTH = 8  # members in one path ("a.b.c" is 3)
MAX_PREFIX = 32  # elements in one key prefix, path prefix or suffix
MAX_VALUE_BYTES = 4096  # the JSON text of one compared value (rough: its Python repr)
INT64 = 2**63  # integers of a filter from -INT64 to INT64 - 1 are bound as integers


class FilterError(ValueError):
    """A filter, key prefix or path pattern the host refuses; `field` names where."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Condition:
    """`content[path...] <op> value`; `kind` is the JSON type the field must have."""

    path: tuple[str, ...]
    op: str
    value: Any
    kind: str


@dataclass(frozen=True, slots=True)
class KeyPrefix:
    """The key member `field` is an array of strings whose first elements are `elements`."""

    field: str
    elements: tuple[str, ...]


def json_type(value: Any) -> str:
    """The JSON type of a decoded value: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def has_nul(value: Any) -> bool:
    """True when a filter value (or any string in it, member names included) holds U+0000,
    which neither backend's JSON functions read (each store answers such a condition in SQL)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    return False


def _path(name: str, field: str) -> tuple[str, ...]:
    parts = tuple(name.split("."))
    if not all(is_member(p) for p in parts):
        raise FilterError(f"filter key {name!r}: members are letters, digits, '_' or '-',"
                          " joined by '.'", field)
    return parts


def parse_filter(spec: dict[str, Any], field: str = "filter") -> tuple[Condition, ...]:
    """The conditions of a retrieve's `filter`, ANDed. Raises `FilterError` (with `field`)
    for a bad key, operator or value, or a filter over the bounds."""
    out: list[Condition] = []

    def walk(prefix: tuple[str, ...], obj: dict[str, Any]) -> None:
        for name, value in obj.items():
            if not isinstance(name, str):
                raise FilterError("filter keys are strings", field)
            path = prefix + _path(name, field)
            if len(path) > MAX_DEPTH:
                raise FilterError(f"filter path {'.'.join(path)!r} is deeper than {MAX_DEPTH}",
                                  field)
            if isinstance(value, dict) and value and all(
                    isinstance(k, str) and k.startswith("$") for k in value):
                for op, operand in value.items():
                    out.append(_condition(path, op, operand, field))
            elif isinstance(value, dict) and value and not any(
                    isinstance(k, str) and k.startswith("$") for k in value):
                walk(path, value)
            elif isinstance(value, dict) and value:
                raise FilterError(f"filter {'.'.join(path)!r} mixes operators and members",
                                  field)
            else:
                out.append(_condition(path, "$eq", value, field))
            if len(out) > MAX_CONDITIONS:
                raise FilterError(f"more than {MAX_CONDITIONS} filter conditions", field)

    if not isinstance(spec, dict):
        raise FilterError("filter is an object", field)
    walk((), spec)
    return tuple(out)


def _condition(path: tuple[str, ...], op: str, value: Any, field: str) -> Condition:
    if op not in OPERATORS:
        raise FilterError(f"unknown filter operator {op!r} (one of {', '.join(OPERATORS)})",
                          field)
    try:
        kind = json_type(value)
    except TypeError as err:
        raise FilterError(str(err), field) from None
    if kind == "number" and type(value) is int and not -INT64 <= value < INT64:
        # beyond 64 bits (SQLite's INTEGER): the number as a double, as PostgreSQL compares it
        if not -DOUBLE_LIMIT < value < DOUBLE_LIMIT:
            raise FilterError("a filter number is within a double's range", field)
        value = float(value)
    if kind == "number" and not math.isfinite(value):
        raise FilterError("filter numbers are finite", field)
    if op in ORDERINGS and kind not in ("number", "string"):
        raise FilterError(f"{op} compares a number or a string, not {kind}", field)
    if kind in ("array", "object", "string") and len(repr(value)) > MAX_VALUE_BYTES:
        raise FilterError(f"a filter value is over {MAX_VALUE_BYTES} bytes", field)
    if kind in ("array", "object") and not numbers_fit(repr(value).encode(), value):
        raise FilterError("a filter number is within a double's range", field)
    return Condition(path, op, value, kind)


def parse_key_prefix(spec: dict[str, list[str]], field: str = "key_prefix"
                     ) -> tuple[KeyPrefix, ...]:
    """The key prefixes of a retrieve's `key_prefix` (member -> leading elements), ANDed.
    An empty list constrains nothing. Raises `FilterError` over the bounds."""
    out = []
    if len(spec) > MAX_DEPTH:
        raise FilterError(f"more than {MAX_DEPTH} key prefixes", field)
    for name, elements in spec.items():
        if not is_member(name):
            raise FilterError(f"key member {name!r}: letters, digits, '_' or '-'", field)
        if len(elements) > MAX_PREFIX:
            raise FilterError(f"a key prefix has at most {MAX_PREFIX} elements", field)
        if elements:
            out.append(KeyPrefix(name, tuple(elements)))
    return tuple(out)


def _at(obj: Any, path: Sequence[str]) -> tuple[bool, Any]:
    for member in path:
        if not isinstance(obj, dict) or member not in obj:
            return False, None
        obj = obj[member]
    return True, obj


def _holds(c: Condition, found: bool, value: Any) -> bool:
    if not found or json_type(value) != c.kind:
        return False
    if c.op == "$eq":
        return bool(value == c.value)
    if c.op == "$ne":
        return bool(value != c.value)
    if c.op == "$gt":
        return bool(value > c.value)
    if c.op == "$gte":
        return bool(value >= c.value)
    if c.op == "$lt":
        return bool(value < c.value)
    return bool(value <= c.value)


def matches(content: Any, key: Any, where: Iterable[Condition],
            prefixes: Iterable[KeyPrefix]) -> bool:
    """True when decoded `content` meets every condition and decoded `key` every prefix."""
    for c in where:
        found, value = _at(content, c.path)
        if not _holds(c, found, value):
            return False
    for p in prefixes:
        got = key.get(p.field) if isinstance(key, dict) else None
        if not isinstance(got, list) or tuple(got[:len(p.elements)]) != p.elements:
            return False
    return True


def path_matches(path: Sequence[str], prefix: Sequence[str], suffix: Sequence[str]) -> bool:
    """True when `path` starts with `prefix` and ends with `suffix` ("*": any one element)."""
    if len(path) < len(prefix) or len(path) < len(suffix):
        return False
    if any(p != "*" and p != e for p, e in zip(prefix, path)):
        return False
    return not any(s != "*" and s != e for s, e in zip(reversed(suffix), reversed(path)))


def select_paths(values: Iterable[Any], prefix: Sequence[str], suffix: Sequence[str],
                 max_depth: int, limit: int, offset: int) -> list[list[str]]:
    """The page of distinct paths among `values` (decoded key members; those that are not
    arrays of strings are skipped) that `path_matches`, each cut to `max_depth` (0: whole),
    sorted element by element."""
    seen: set[tuple[str, ...]] = set()
    for v in values:
        if not isinstance(v, list) or not all(isinstance(e, str) for e in v):
            continue
        if path_matches(v, prefix, suffix):
            seen.add(tuple(v[:max_depth]) if max_depth > 0 else tuple(v))
    return [list(p) for p in sorted(seen)[offset:offset + limit]]
