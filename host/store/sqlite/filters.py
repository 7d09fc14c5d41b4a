"""The store extensions' filters in SQLite SQL: conditions on content values, key prefixes.

`where_sql(where, prefixes)` is ANDed to a read's WHERE (host/store/sqlite/reads.py `read_where`),
so the filters apply before any count, cap or `LIMIT`. Paths are JSON paths with every member
quoted (`$."a"."b"`); the members were checked by `host.store.filters` (letters, digits, `_`,
`-`), and values travel as parameters, never in the SQL text.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from host.store.filters import Condition, KeyPrefix, has_nul

__all__ = ["NO_NUL_CONTENT", "NO_NUL_KEY", "json_path", "where_sql"]

_SQL_OP = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
# json_type() of each JSON type (integers and reals are one type: numbers)
_TYPES = {"null": "('null')", "boolean": "('true','false')", "number": "('integer','real')",
          "string": "('text')", "array": "('array')", "object": "('object')"}


NO_NUL_CONTENT = "instr(e.content, '\\u0000') = 0"
NO_NUL_KEY = "instr(e.key, '\\u0000') = 0"


def json_path(path: Sequence[str]) -> str:
    """The SQLite JSON path of `path` (members quoted)."""
    return "$" + "".join(f'."{m}"' for m in path)


def _condition(c: Condition) -> tuple[str, list[object]]:
    path = json_path(c.path)
    if has_nul(c.value):  # no field a filter reads holds U+0000 (see where_sql)
        if c.op == "$eq":
            return "0", []
        if c.op == "$ne":
            return f"json_type(e.content, ?) IN {_TYPES[c.kind]}", [path]
        c = Condition(c.path, c.op, c.value.replace("\x00", ""), c.kind)
    typed = f"json_type(e.content, ?) IN {_TYPES[c.kind]}"
    if c.kind == "null":
        return (typed if c.op == "$eq" else "0"), ([path] if c.op == "$eq" else [])
    if c.kind == "boolean":  # json_extract gives 1/0: compare the type names instead
        want = "true" if c.value else "false"
        return (f"json_type(e.content, ?) {'=' if c.op == '$eq' else '!='} ?"
                f" AND {typed}"), [path, want, path]
    if c.kind in ("array", "object"):
        value: object = msgspec.json.encode(c.value).decode()
        return f"{typed} AND json(json_extract(e.content, ?)) {_SQL_OP[c.op]} ?", [
            path, path, value]
    return f"{typed} AND json_extract(e.content, ?) {_SQL_OP[c.op]} ?", [path, path, c.value]


def _prefix(p: KeyPrefix) -> tuple[str, list[object]]:
    if has_nul(list(p.elements)):
        return "0", []
    member = json_path((p.field,))
    parts = [f"json_type(e.key, '{member}') = 'array'"]
    params: list[object] = []
    for i, element in enumerate(p.elements):
        parts.append(f"json_extract(e.key, '{member}[{i}]') = ?")
        params.append(element)
    return " AND ".join(parts), params


def where_sql(where: Sequence[Condition], prefixes: Sequence[KeyPrefix]
              ) -> tuple[str, list[object]]:
    """The SQL (starting with " AND ", or "") and parameters of `where` and `prefixes`."""
    # SQLite's JSON functions cut a string at U+0000 ("a\u0000b" reads as "a"): a content or
    # key whose text has the escape is read as having no fields, as on PostgreSQL
    sql: list[str] = [NO_NUL_CONTENT] if where else []
    if prefixes:
        sql.append(NO_NUL_KEY)
    params: list[object] = []
    for c in where:
        s, p = _condition(c)
        sql.append(s)
        params += p
    for k in prefixes:
        s, p = _prefix(k)
        sql.append(s)
        params += p
    return ("".join(f" AND ({s})" for s in sql), params) if sql else ("", [])
