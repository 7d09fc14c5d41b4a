"""Client-supplied vectors on SQLite's write path (the store extension): a space's dimension
and an entry's vectors, written by `host.store.sqlite.writes.put_entries` in its transaction (an
entry with vectors is not queued for the host's embedder)."""

from __future__ import annotations

import sqlite3

from host.store.records import NewEntry

__all__ = ["space_fits", "write_client_vectors"]


def space_fits(conn: sqlite3.Connection, namespace: str, e: NewEntry) -> bool:
    """True when `e` has no vectors or they have its space's dimension; a space's first
    vectors fix it (recorded here, in the caller's transaction)."""
    if not e.vectors:
        return True
    row = conn.execute("SELECT dims FROM client_spaces WHERE namespace = ? AND space = ?",
                       (namespace, e.vector_space)).fetchone()
    if row is None:
        conn.execute("INSERT INTO client_spaces (namespace, space, dims) VALUES (?, ?, ?)",
                     (namespace, e.vector_space, e.dims))
        return True
    return int(row[0]) == e.dims


def write_client_vectors(conn: sqlite3.Connection, entry_id: int, e: NewEntry,
                         replaced: bool) -> None:
    """Give entry `entry_id` the vectors of `e` (none: it keeps none), replacing its own.

    An entry stored with vectors is not embedded by the host (its vectors are the client's;
    it is found by keywords and in its space): it leaves the embedding queue the insert or
    update trigger put it in, and a vector the host computed for an earlier text goes (the
    search's index drops it through `vectors_gone`)."""
    if replaced:
        conn.execute("DELETE FROM client_vectors WHERE entry_id = ?", (entry_id,))
    if e.vectors:
        conn.execute("INSERT INTO client_vectors (entry_id, space, vecs) VALUES (?, ?, ?)",
                     (entry_id, e.vector_space, e.vectors))
        conn.execute("DELETE FROM embed_queue WHERE entry_id = ?", (entry_id,))
        if conn.execute("DELETE FROM vectors WHERE entry_id = ? RETURNING entry_id",
                        (entry_id,)).fetchone() is not None:
            conn.execute("INSERT OR IGNORE INTO vectors_gone (entry_id) VALUES (?)", (entry_id,))
