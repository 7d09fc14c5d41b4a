"""Writes of `put_entries` held back until just before the transaction commits.

Two kinds, each written once a commit group instead of once an entry:

- **Keyword-index rows.** FTS5 (SQLite 3.40) writes out its pending terms whenever a later
  write statement of the transaction opens a statement savepoint, as the insert into `entries`
  (it has triggers) does. Written in turn with each entry, every FTS row became a segment of its
  own, merged again and again (~20 us an entry). Held here and written together, rowid
  ascending, the rows of a whole group make one segment (~3 us an entry). A row whose entry is
  gone by the flush (forgotten later in the same group) is not written. Deleted entries' rows
  too: the `entries_ad` trigger queues their ids in `fts_gone` (a delete in FTS5 cost as much
  as an insert, ~35 us, for the same reason), and the flush deletes them with the rest.
- **Quota counters** (`usage`, schema migration 4). An insert or an overwrite adds its change in
  entries and bytes here; the flush writes one upsert a (namespace, agent) with the summed
  changes. Deletes still count through the `entries_ad` trigger, whoever deletes (the usage rows
  are created at the first read, so a delete of an entry whose count is still held takes it off
  the row, below zero until the flush). `usage` reads the table plus what is held, so a quota
  check inside the group sees every write before it.

- **Keyword statistics** (`keyword_stats`, schema migration 6): the rows and tokens of each
  namespace's keyword rows (`host.store.sqlite.bm25`), changed here as the rows are written
  and dropped, in the same transaction.

The owner of the transaction calls `flush` before COMMIT and `clear` after a rollback;
`mark`/`restore` undo what one operation recorded, for an operation rolled back to its
savepoint (see `host.store.sqlite.writer`). Reads inside the transaction do not see the held keyword
rows; nothing in a write group reads them but `sqlite.vectors.write_vectors`, which then leaves
the entry queued for embedding. One thread at a time (the writer's).
"""

from __future__ import annotations

import sqlite3

from host.store.sqlite.bm25 import row_length

__all__ = ["Deferred"]

_MISSING = object()
_Counts = tuple[int, int, int, int]  # namespace entries, namespace bytes, agent entries, bytes


class Deferred:
    """The held writes of one transaction (or of one commit group)."""

    __slots__ = ("_rows", "_counts", "_seen", "_quiet_at", "_undo", "_journal")

    def __init__(self) -> None:
        # rowid -> (drop the indexed row first?, (scope token, text) or None)
        self._rows: dict[int, tuple[bool, tuple[str, str] | None]] = {}
        # (namespace, agent) -> (entries, bytes) to add; agent "" is the namespace total
        self._counts: dict[tuple[str, str], tuple[int, int]] = {}
        # (namespace, agent) -> the table's counts, as read while no other statement ran
        self._seen: dict[tuple[str, str], _Counts] = {}
        self._quiet_at = -1  # conn.total_changes at the end of the last put (see `settled`)
        self._undo: list[tuple[dict, object, object]] = []
        self._journal = False  # record undo steps (from the first `mark` to `clear`)

    def _set(self, table: dict, key: object, value: object) -> None:
        if self._journal:
            self._undo.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    # -- keyword rows --------------------------------------------------------------------------

    def replace(self, rowid: int) -> None:
        """The indexed row `rowid` (if any) is to be dropped at the flush."""
        old = self._rows.get(rowid)
        self._set(self._rows, rowid, (True, old[1] if old else None))

    def index(self, rowid: int, token: str, text: str) -> None:
        """Index `text` as row `rowid` of namespace `token` at the flush (last one wins)."""
        old = self._rows.get(rowid)
        self._set(self._rows, rowid, (old[0] if old else False, (token, text)))

    # -- quota counters ------------------------------------------------------------------------

    def count(self, namespace: str, agent: str, entries: int, size: int) -> None:
        """`agent` has `entries` more entries and `size` more bytes in `namespace` (negative:
        fewer), and so has the namespace."""
        for key in ((namespace, agent), (namespace, "")):
            e, b = self._counts.get(key, (0, 0))
            self._set(self._counts, key, (e + entries, b + size))

    def usage(self, conn: sqlite3.Connection, namespace: str, agent: str) -> _Counts:
        """Entries and bytes of `namespace` and of `agent` in it: the table plus what is held.

        A put reads the table once a group and (namespace, agent): again only after a
        statement other than a put's changed rows (`conn.total_changes` moved since `settled`:
        a forget, an expiry, any other operation of the group)."""
        if conn.total_changes != self._quiet_at:
            self._seen.clear()
        key = (namespace, agent)
        t = self._seen.get(key)
        if t is None:
            rows = {
                r[0]: (r[1], r[2])
                for r in conn.execute(
                    "SELECT agent, entries, bytes FROM usage WHERE namespace = ?"
                    " AND agent IN ('', ?)",
                    key,
                )
            }
            if len(rows) < 2 - (agent == ""):
                # the rows must exist before the group's held counts do: a delete later in the
                # group (entries_ad) then takes its entry off the row, even from zero
                conn.execute("INSERT OR IGNORE INTO usage (namespace, agent, entries, bytes)"
                             " VALUES (?, ?, 0, 0), (?, '', 0, 0)", (namespace, agent, namespace))
            ns, own = rows.get("", (0, 0)), rows.get(agent, (0, 0))
            t = self._seen[key] = (ns[0], ns[1], own[0], own[1])
        ns_held = self._counts.get((namespace, ""), (0, 0))
        own_held = self._counts.get(key, (0, 0))
        return (t[0] + ns_held[0], t[1] + ns_held[1], t[2] + own_held[0], t[3] + own_held[1])

    def settled(self, conn: sqlite3.Connection) -> None:
        """The `usage` table is as this put read it: the put deleted nothing, and its other
        writes leave the table alone (call at the end of a put)."""
        self._quiet_at = conn.total_changes

    # -- the transaction -----------------------------------------------------------------------

    def mark(self) -> int:
        """A point to `restore` to. Undo steps are recorded from the first mark on (a group
        run without savepoints needs none: it is rolled back whole or not at all)."""
        self._journal = True
        return len(self._undo)

    def restore(self, mark: int) -> None:
        """Forget what was recorded since `mark`."""
        while len(self._undo) > mark:
            table, key, old = self._undo.pop()
            if old is _MISSING:
                del table[key]
            else:
                table[key] = old
        self._seen.clear()
        self._quiet_at = -1

    def clear(self) -> None:
        """Forget everything recorded (the transaction rolled back, or was flushed)."""
        self._rows.clear()
        self._counts.clear()
        self._seen.clear()
        self._quiet_at = -1
        self._undo.clear()
        self._journal = False

    def flush(self, conn: sqlite3.Connection) -> None:
        """Write what is held and delete the keyword rows of deleted entries (`fts_gone`),
        inside the transaction, and forget what was held."""
        counts = [(ns, agent, e, b) for (ns, agent), (e, b) in self._counts.items()
                  if e or b]
        gone = conn.execute("SELECT entry_id FROM fts_gone").fetchall()
        if gone:
            conn.execute("DELETE FROM fts_gone")
            for (rowid,) in gone:
                self.replace(rowid)
        rows, drops = self._keyword_rows(conn)
        self.clear()
        if counts:
            conn.executemany(
                "INSERT INTO usage (namespace, agent, entries, bytes) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (namespace, agent) DO UPDATE"
                " SET entries = entries + excluded.entries, bytes = bytes + excluded.bytes",
                counts,
            )
        stats: dict[str, list[int]] = {}  # scope token -> [rows, tokens] to add
        if drops:
            self._count_rows(conn, [d[0] for d in drops], -1, stats)
            conn.executemany("DELETE FROM entries_fts WHERE rowid = ?", drops)
        if rows:
            conn.executemany("INSERT INTO entries_fts (rowid, scope, body) VALUES (?, ?, ?)", rows)
            self._count_rows(conn, [r[0] for r in rows], 1, stats)
        if stats:
            conn.executemany(
                "INSERT INTO keyword_stats (scope, rows, tokens) VALUES (?, ?, ?)"
                " ON CONFLICT (scope) DO UPDATE"
                " SET rows = rows + excluded.rows, tokens = tokens + excluded.tokens",
                [(scope, n, t) for scope, (n, t) in stats.items() if n or t])

    @staticmethod
    def _count_rows(
        conn: sqlite3.Connection, rowids: list[int], sign: int, stats: dict[str, list[int]]
    ) -> None:
        """Add `sign` times the keyword rows `rowids` (those that exist) and their lengths to
        `stats` (scope token -> [rows, tokens]), read from FTS5's content and docsize tables."""
        for i in range(0, len(rowids), 500):
            chunk = rowids[i:i + 500]
            for scope, docsize in conn.execute(
                    "SELECT c.c0, d.sz FROM entries_fts_content c JOIN entries_fts_docsize d"
                    f" ON d.id = c.id WHERE c.id IN ({','.join('?' * len(chunk))})", chunk):
                got = stats.setdefault(scope, [0, 0])
                got[0] += sign
                got[1] += sign * row_length(docsize)

    def _keyword_rows(
        self, conn: sqlite3.Connection
    ) -> tuple[list[tuple[int, str, str]], list[tuple[int]]]:
        """The held keyword rows of live entries and the rowids to drop, rowid ascending."""
        if not self._rows:
            return [], []
        ids = sorted(self._rows)
        live: set[int] = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            live.update(r[0] for r in conn.execute(
                f"SELECT id FROM entries WHERE id IN ({','.join('?' * len(chunk))})", chunk))
        drops, rows = [], []
        for rowid in ids:
            drop, row = self._rows[rowid]
            if drop:
                drops.append((rowid,))
            if row is not None and rowid in live:
                rows.append((rowid, *row))
        return rows, drops
