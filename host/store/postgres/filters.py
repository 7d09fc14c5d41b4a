"""The store extensions' filters in PostgreSQL SQL: conditions on content values, key prefixes.

The same rules as SQLite's (`host/store/sqlite/filters.py`, `host.store.filters`): a condition
holds only when the field exists with the value's JSON type; strings compare by code point
(`COLLATE "C"`), numbers as doubles, arrays and objects as jsonb (member order does not
matter here). Every value and path is a parameter, never SQL text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from host.store.filters import Condition, KeyPrefix, has_nul

__all__ = ["CONTENT", "KEY", "where_sql"]

_SQL_OP = {"$eq": "=", "$ne": "<>", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_TYPE = {"null": "null", "boolean": "boolean", "number": "number", "string": "string",
         "array": "array", "object": "object"}


# jsonb holds no U+0000: a content (or key) whose text has the escape is read as having no
# fields here (CASE keeps the cast from it), so such a row never fails a filtered read
CONTENT = "(CASE WHEN strpos(e.content, '\\u0000') = 0 THEN e.content::jsonb END)"
KEY = "(CASE WHEN strpos(e.key, '\\u0000') = 0 THEN e.key::jsonb END)"


def _condition(c: Condition, p: Callable[[Any], str]) -> str:
    if has_nul(c.value) and c.op == "$eq":  # no field read here holds U+0000 (CONTENT)
        return "false"  # (before any parameter: an unused one has no type)
    x = f"({CONTENT} #> {p(list(c.path))}::text[])"
    typed = f"jsonb_typeof({x}) = '{_TYPE[c.kind]}'"
    op = _SQL_OP[c.op]
    if has_nul(c.value):
        if c.op == "$ne":
            return typed
        c = Condition(c.path, c.op, c.value.replace("\x00", ""), c.kind)
    if c.kind == "null":
        return typed if c.op == "$eq" else "false"
    if c.kind == "number":
        # CASE: AND does not keep a string from the cast (SQL evaluates in any order)
        return (f"CASE WHEN {typed} THEN ({x})::float8 {op} {p(float(c.value))}::float8"
                " ELSE false END")
    if c.kind == "string":
        return f'{typed} AND ({x} #>> \'{{}}\') COLLATE "C" {op} {p(c.value)}::text COLLATE "C"'
    return f"{typed} AND {x} {op} {p(msgspec.json.encode(c.value).decode())}::jsonb"


def _prefix(k: KeyPrefix, p: Callable[[Any], str]) -> str:
    if has_nul(list(k.elements)):
        return "false"
    member = f"({KEY} -> {p(k.field)}::text)"
    parts = [f"jsonb_typeof({member}) = 'array'"]
    for i, element in enumerate(k.elements):
        parts.append(f"({member} -> {int(i)}) = to_jsonb({p(element)}::text)")
    return " AND ".join(parts)


def where_sql(where: Sequence[Condition], prefixes: Sequence[KeyPrefix],
              p: Callable[[Any], str]) -> str:
    """The SQL (starting with " AND ", or "") of `where` and `prefixes`; `p` takes each
    parameter and gives its placeholder."""
    parts = [_condition(c, p) for c in where] + [_prefix(k, p) for k in prefixes]
    return "".join(f" AND ({s})" for s in parts)
