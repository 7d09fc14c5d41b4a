"""How LangGraph's store maps onto A2E entries: pure functions, no I/O.

A LangGraph item (namespace tuple, key, value) is one entry of the store's A2E namespace and
tier: key `{"ns": [...namespace], "k": key}`, content the value, `ttl` the item's TTL in
seconds. A namespace prefix is a `key_prefix` on `ns`; `list_namespaces` is `memory/paths`
on `ns`; a filter is the retrieve's `filter` (same operators). With an `index`, the vectors
of the fields it names go with the entry in the space `langgraph-<dims>`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

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
    "entry_key",
    "get_key",
    "item_of",
    "paths_fields",
    "search_fields",
    "space_of",
    "texts_to_embed",
    "ttl_seconds",
]

FIELD = "ns"  # the key member holding the LangGraph namespace
_FILTER_KEY = re.compile(r"^[a-zA-Z0-9_.-]+$")  # the keys LangGraph's stores accept


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


def item_of(entry: Mapping[str, Any], search: bool = False) -> Item | SearchItem:
    """The LangGraph item of a retrieve reply's entry (a `SearchItem` with `score` for a
    search: the relevance when the read had a query or a vector, else None)."""
    key = entry["key"]
    namespace = tuple(key[FIELD])
    created, updated = _when(entry["created_at"]), _when(entry["updated_at"])
    if search:
        return SearchItem(namespace=namespace, key=key["k"], value=entry["content"],
                          created_at=created, updated_at=updated,
                          score=entry.get("relevance"))
    return Item(value=entry["content"], key=key["k"], namespace=namespace, created_at=created,
                updated_at=updated)


def check_filter(spec: Mapping[str, Any] | None) -> None:
    """Refuse a filter key as LangGraph's stores do (`ValueError`), before anything is sent."""
    for key in spec or {}:
        if not isinstance(key, str) or not _FILTER_KEY.match(key):
            raise ValueError(f"Invalid filter key: '{key}'. Filter keys must contain only"
                             " alphanumeric characters, underscores, dots, and hyphens.")


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
    fields: dict[str, Any] = {"limit": max(1, op.limit), "offset": max(0, op.offset)}
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
            "max_depth": op.max_depth or 0, "limit": max(1, op.limit),
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


def get_key(op: GetOp) -> dict[str, Any]:
    """The entry key a get reads."""
    return entry_key(op.namespace, op.key)

