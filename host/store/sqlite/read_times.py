"""When each entry was last read, on SQLite (docs/growth.md, "Importance that fades").

`MIGRATION` (schema migration 14, for `host/store/sqlite/schema.py`'s list) adds `read_at`, the
time of the entry's last read over the wire (NULL: never read), and `entries_value`, the index
of eviction's order: an agent's entries by score, then by the later of their last write and
last read (`LAST_USED`), then by row. The reads themselves are coalesced in memory by the host
(`host.store.growth.ReadLog`) and written here in batches by the writer thread (`record`):
a read never waits for a write, and a crash loses at most the read times not yet flushed,
never an entry.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

__all__ = ["LAST_USED", "MIGRATION", "read_times", "record"]

# the later of an entry's last write and last read: the expression `entries_value` indexes
# (a query uses the index only when it orders by this very text)
LAST_USED = "max(updated_at, coalesce(read_at, 0.0))"

MIGRATION = f"""
ALTER TABLE entries ADD COLUMN read_at REAL;
CREATE INDEX entries_value ON entries (namespace, agent, score, {LAST_USED});
"""

# a read moves `read_at` forward only (a batch flushed late never moves it back)
_RECORD = ("UPDATE entries SET read_at = ?5 WHERE namespace = ?1 AND tier = ?2 AND owner = ?3"
           " AND key = ?4 AND (read_at IS NULL OR read_at < ?5)")
_TIMES = ("SELECT id, read_at FROM entries WHERE id IN (SELECT value FROM json_each(?))"
          " AND read_at IS NOT NULL")
_ids = msgspec.json.Encoder()


def record(conn: sqlite3.Connection, reads: Sequence[tuple[str, str, str, bytes, float]]) -> int:
    """Write the read times of `reads` ((namespace, tier, owner, key, when) each), in the
    writer's transaction; entries gone meanwhile are skipped. How many moved."""
    before = conn.total_changes
    conn.executemany(_RECORD, [(ns, tier, owner, key.decode(), when)
                               for ns, tier, owner, key, when in reads])
    return conn.total_changes - before


def read_times(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, float]:
    """The last read time of each of `ids` that was ever read (by row id)."""
    if not ids:
        return {}
    return dict(conn.execute(_TIMES, (_ids.encode(list(ids)).decode(),)).fetchall())
