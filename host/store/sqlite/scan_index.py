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
_ARRAY = f"json_type(e.key, '$.\"{INDEXED_MEMBER}\"') = 'array'"  # the index's WHERE
# partial: only the reads that say the member is an array (a prefix on it) may use the index;
# a plain read of the namespace keeps its own (walking this one would read the table's rows
# out of order: ~3 times slower at 1,000,000 entries)
MIGRATION = """
CREATE INDEX IF NOT EXISTS entries_key_ns
    ON entries (namespace, tier, owner, json_extract(key, '$."ns"'))
    WHERE json_type(key, '$."ns"') = 'array';
"""


def prefix_range(prefixes: Sequence[KeyPrefix]) -> tuple[str, list[object]]:
    """The SQL (" AND ..." or "") and parameters of the index range of `prefixes`, if any."""
    bounds = prefix_bounds(prefixes, ",")
    if bounds is None:
        return "", []
    return f" AND {_ARRAY} AND {_TEXT} >= ? AND {_TEXT} < ?", list(bounds)
