"""What both backends' key index shares: the key member it holds and the text range a key
prefix reads in it (`host/store/sqlite/scan_index.py`, `host/store/postgres/scan_index.py`).

The index holds the JSON text of each key's `ns` member (the LangGraph adapter's namespace,
`host.langgraph.mapping.FIELD`). Keys are canonical JSON (`protocol.keys`), so the text of an
array starting with the elements of a prefix is the prefix's own text followed by `,` or `]`,
both below `^`: the range [text, text + "^"). Only for plain elements (printable ASCII but `"`
and `\\`), which every writer of JSON writes as they are; others get no range.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from host.store.filters import KeyPrefix

__all__ = ["INDEXED_MEMBER", "leading", "prefix_bounds"]

INDEXED_MEMBER = "ns"
_PLAIN = re.compile(r'^[ !#-\[\]-~]*$')  # printable ASCII but '"' and '\'


def prefix_bounds(prefixes: Sequence[KeyPrefix], separator: str) -> tuple[str, str] | None:
    """The text range (low, high) of the first prefix on `INDEXED_MEMBER` whose elements are
    all plain, the elements written with `separator` between them (SQLite's JSON text has
    ",", PostgreSQL's jsonb ", "); None when there is none."""
    for k in prefixes:
        if k.field == INDEXED_MEMBER and k.elements and all(
                _PLAIN.match(e) for e in k.elements):
            low = "[" + separator.join(f'"{e}"' for e in k.elements)
            return low, low + "^"
    return None


def leading(field: str, prefix: Sequence[str]) -> KeyPrefix:
    """The key prefix of a paths request's `prefix` on `field`: its elements up to the first
    "*" (any element)."""
    return KeyPrefix(field, tuple(itertools.takewhile(lambda el: el != "*", prefix)))
