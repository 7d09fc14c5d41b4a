"""How LangGraph's store maps onto A2E entries: pure functions, no I/O.

A LangGraph item (namespace tuple, key, value) is one entry of the store's A2E namespace and
tier: key `{"ns": [...namespace], "k": key}`, content the value, `ttl` the item's TTL in
seconds. A namespace prefix is a `key_prefix` on `ns`; `list_namespaces` is `memory/paths`
on `ns`; a filter is the retrieve's `filter` (same operators). With an `index`, the vectors
of the fields it names go with the entry in the space `langgraph-<dims>`.

An entry of the same A2E namespace that the adapter did not write (another client's key, a
content that is not an object) is no item: `item_of` gives None and the store skips it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    PutOp,
    SearchItem,
    SearchOp,
    get_text_at_path,
    tokenize_path,
)

__all__ = [
    "FIELD",
    "check_filter",
    "check_value",
    "entry_key",
    "get_key",
    "item_of",
    "paths_fields",
    "search_fields",
    "space_of",
    "texts_to_embed",
    "ttl_seconds",
    "unit_vectors",
]

FIELD = "ns"  # the key member holding the LangGraph namespace
_FILTER_KEY = re.compile(r"[a-zA-Z0-9_.-]+")  # the keys LangGraph's stores accept


def entry_key(namespace: Sequence[str], key: str) -> dict[str, Any]:
    """The A2E entry key of a LangGraph item."""
    return {FIELD: list(namespace), "k": key}


def ttl_seconds(minutes: float | None) -> int:
    """An item's TTL in minutes as the entry's whole seconds (at least 1; 0: none)."""
    if minutes is None:
        return 0
    return max(1, math.ceil(minutes * 60))


def space_of(dims: int) -> str:
    """The vector space of an index of `dims` dimensions."""
    return f"langgraph-{dims}"


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _is_item(entry: Mapping[str, Any]) -> bool:
    """Whether a retrieve reply's entry is an item the adapter wrote: key `{"ns": [labels],
    "k": key}` (strings, nothing else), content an object."""
    key = entry.get("key")
    if not isinstance(key, dict) or len(key) != 2 or not isinstance(key.get("k"), str):
        return False
    ns = key.get(FIELD)
    return (isinstance(ns, list) and bool(ns) and all(isinstance(x, str) for x in ns)
            and isinstance(entry.get("content"), dict))


def item_of(entry: Mapping[str, Any], search: bool = False) -> Item | SearchItem | None:
    """The LangGraph item of a retrieve reply's entry (a `SearchItem` with `score` for a
    search: the relevance when the read had a query or a vector, else None); None for an
    entry the adapter did not write (`_is_item`)."""
    if not _is_item(entry):
        return None
    key = entry["key"]
    namespace = tuple(key[FIELD])
    created, updated = _when(entry["created_at"]), _when(entry["updated_at"])
    if search:
        return SearchItem(namespace=namespace, key=key["k"], value=entry["content"],
                          created_at=created, updated_at=updated,
                          score=entry.get("relevance"))
    return Item(value=entry["content"], key=key["k"], namespace=namespace, created_at=created,
                updated_at=updated)


def _non_string_key(value: Any) -> Any:
    """The first object member name in `value` (nested) that is not a string, else None."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, inner in v.items():
                if not isinstance(k, str):
                    return k
                stack.append(inner)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return None


def check_value(value: Mapping[str, Any]) -> None:
    """Refuse a put's value with an object member name that is not a string (`TypeError`, as
    LangGraph's SQLite store's JSON encoder does) before anything is sent: JSON would turn
    `{1: "a"}` into `{"1": "a"}` and the item would not read back as it was put."""
    bad = _non_string_key(value)
    if bad is not None:
        raise TypeError(f"an item's value is JSON: the member name {bad!r}"
                        f" ({type(bad).__name__}) is not a string")


def check_filter(spec: Mapping[str, Any] | None) -> None:
    """Refuse a filter key as LangGraph's stores do (`ValueError`), and a member name that
    is not a string inside a filter's value, before anything is sent."""
    for key in spec or {}:
        if not isinstance(key, str) or not _FILTER_KEY.fullmatch(key):
            raise ValueError(f"Invalid filter key: '{key}'. Filter keys must contain only"
                             " alphanumeric characters, underscores, dots, and hyphens.")
    bad = _non_string_key(dict(spec or {}))
    if bad is not None:
        raise ValueError(f"Invalid filter: the member name {bad!r} is not a string")


_MAX = 1.7976931348623157e308  # the largest double: every finite number is within it
_NEVER = {"$gt": _MAX, "$lt": -_MAX}  # a condition no number meets


def _operand(op: str, value: Any) -> dict[str, Any]:
    """One operator's condition with JSON-safe numbers: an infinity or NaN becomes the
    condition on finite numbers it amounts to, an integer beyond a double becomes a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return {op: value}
    if isinstance(value, int):
        return {op: float(value)} if abs(value) > 2**53 else {op: value}
    never = dict(_NEVER)
    if math.isnan(value):
        return {"$gte": -_MAX} if op == "$ne" else never
    if math.isinf(value):
        below = value > 0  # +inf: every number is below it
        if op in ("$lt", "$lte", "$ne"):
            return {"$gte": -_MAX} if below or op == "$ne" else never
        if op in ("$gt", "$gte"):
            return never if below else {"$gte": -_MAX}
        return never
    return {op: value}


def _conditions(value: dict[str, Any]) -> dict[str, Any]:
    """A field's operators with JSON-safe numbers (`_operand`), ANDed: a condition that can
    never hold wins; "any number" gives way to another condition of the same operator."""
    out: dict[str, Any] = {}
    for op, operand in value.items():
        cond = _operand(op, operand)
        if cond == _NEVER:
            return dict(_NEVER)
        for k, v in cond.items():
            if k not in out or out[k] == -_MAX:
                out[k] = v
    return out


def _filter(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A LangGraph filter as the wire's: the same, but numbers JSON cannot carry."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, dict) and value and all(str(k).startswith("$") for k in value):
            out[key] = _conditions(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = _conditions({"$eq": value})
        else:
            out[key] = value
    return out


def search_fields(op: SearchOp) -> dict[str, Any]:
    """The retrieve fields of a search, but its query or vector (the caller's)."""
    check_filter(op.filter)
    fields: dict[str, Any] = {"limit": op.limit, "offset": max(0, op.offset)}
    if op.namespace_prefix:
        fields["key_prefix"] = {FIELD: list(op.namespace_prefix)}
    if op.filter:
        fields["filter"] = _filter(op.filter)
    return fields


def paths_fields(op: ListNamespacesOp) -> dict[str, Any]:
    """The `memory/paths` fields of a namespace listing."""
    prefix: list[str] = []
    suffix: list[str] = []
    for cond in op.match_conditions or ():
        if cond.match_type == "prefix":
            prefix = list(cond.path)
        elif cond.match_type == "suffix":
            suffix = list(cond.path)
        else:
            raise ValueError(f"Unsupported match type: {cond.match_type}")
    return {"field": FIELD, "prefix": prefix, "suffix": suffix,
            "max_depth": op.max_depth or 0, "limit": op.limit,
            "offset": max(0, op.offset)}


def texts_to_embed(op: PutOp, fields: Sequence[tuple[str, str | list[str]]] | None
                   ) -> list[str]:
    """The texts of a put that its index embeds: the fields of `op.index` or else the store's
    `fields`; none with `index=False`, no index or a deletion."""
    if op.value is None or op.index is False or fields is None:
        return []
    paths: Sequence[tuple[str, str | list[str]]] = fields if op.index is None else [
        (p, tokenize_path(p) if p != "$" else "$") for p in op.index]
    texts: list[str] = []
    for _, tokens in paths:
        texts += [t for t in get_text_at_path(op.value, tokens) if isinstance(t, str)]
    return texts


def unit_vectors(vectors: Sequence[Sequence[float]]) -> list[list[float]]:
    """`vectors` as the host keeps them, unit length, each value rounded to 9 decimals: the
    host normalises and stores float32 (about 7 significant digits), so nothing it keeps is
    lost, and a value takes ~13 bytes of JSON instead of ~20 (40 paragraphs of 1,536
    dimensions fit the host's 1 MiB frame). A zero row stays zero; rows of different lengths
    or with a value that is not finite go as they are (the host refuses them)."""
    rows = [list(map(float, v)) for v in vectors]
    if len({len(r) for r in rows}) != 1:
        return rows
    m = np.asarray(rows, dtype=np.float64)
    if not np.isfinite(m).all():
        return rows
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    if not np.isfinite(norms).all():
        return rows
    m = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return np.round(m, 9).tolist()  # type: ignore[no-any-return]


def get_key(op: GetOp) -> dict[str, Any]:
    """The entry key a get reads."""
    return entry_key(op.namespace, op.key)

