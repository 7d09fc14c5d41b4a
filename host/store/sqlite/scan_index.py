"""The SQLite store's index of key paths: a `key_prefix` on the key member `ns` (the LangGraph
adapter's namespace, `host.langgraph.mapping.FIELD`) reads an index range, not the namespace.

`MIGRATION` is the schema migration that creates it (`host/store/sqlite/schema.py`'s next
number): the JSON text of each key's `ns` member beside the visibility range. A key prefix of
plain elements (`prefix_range`) is then the range of that text from `["a","b"` up to
`["a","b"^`: a key is canonical JSON (`protocol.keys`), so a matching array's text is the
prefix's followed by `,` or `]`, both below `^`; elements that JSON would escape, or another
member, get no range (the read walks the namespace, as it did). The range is ANDed to the
prefix's own conditions (`host/store/sqlite/filters.py`), which still decide: with or without
the index, a read returns the same entries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from host.store.filters import KeyPrefix

__all__ = ["INDEXED_MEMBER", "MIGRATION", "prefix_range"]

INDEXED_MEMBER = "ns"
_TEXT = "json_extract(e.key, '$.\"ns\"')"
MIGRATION = """
CREATE INDEX IF NOT EXISTS entries_key_ns
    ON entries (namespace, tier, owner, json_extract(key, '$."ns"'));
"""
_PLAIN = re.compile(r'^[ !#-\[\]-~]*$')  # printable ASCII but '"' and '\': written as is


def prefix_range(prefixes: Sequence[KeyPrefix]) -> tuple[str, list[object]]:
    """The SQL (" AND ..." or "") and parameters of the index range of the first prefix on
    `INDEXED_MEMBER` whose elements are all plain."""
    for p in prefixes:
        if p.field == INDEXED_MEMBER and p.elements and all(
                _PLAIN.match(e) for e in p.elements):
            low = "[" + ",".join(f'"{e}"' for e in p.elements)
            return f" AND {_TEXT} >= ? AND {_TEXT} < ?", [low, low + "^"]
    return "", []
