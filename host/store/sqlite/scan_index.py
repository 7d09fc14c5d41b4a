"""The SQLite store's key index: a `key_prefix` (or a paths prefix) on the key member `ns`
reads an index range, not the whole namespace (`host/store/key_index.py`).

`MIGRATION` is the schema migration that creates it (for `host/store/sqlite/schema.py`'s list):
the JSON text of each key's `ns` member beside the visibility range. `prefix_range` is the
range a read ANDs to the prefix's own conditions (`host/store/sqlite/filters.py`), which still
decide: with or without the index, a read returns the same entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from host.store.filters import KeyPrefix
from host.store.key_index import INDEXED_MEMBER, prefix_bounds

__all__ = ["MIGRATION", "prefix_range"]

_TEXT = f"json_extract(e.key, '$.\"{INDEXED_MEMBER}\"')"
MIGRATION = """
CREATE INDEX IF NOT EXISTS entries_key_ns
    ON entries (namespace, tier, owner, json_extract(key, '$."ns"'));
"""


def prefix_range(prefixes: Sequence[KeyPrefix]) -> tuple[str, list[object]]:
    """The SQL (" AND ..." or "") and parameters of the index range of `prefixes`, if any."""
    bounds = prefix_bounds(prefixes, ",")
    if bounds is None:
        return "", []
    return f" AND {_TEXT} >= ? AND {_TEXT} < ?", list(bounds)
