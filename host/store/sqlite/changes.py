"""The change log on SQLite (`host.store.changes`): plain functions over one connection.

`changes` holds one row a committed request that changed entries. Its `seq` is the change's
number within its namespace (1, 2, 3, ...; since migration 9, before which one counter served
every namespace: the rows from then keep their numbers, so their cursors still resume), strictly
increasing in commit order because one writer commits at a time: the namespace's head plus one,
the head being its newest `seq` or, when pruning left none, its floor. A namespace's cursors so
say nothing of another's commits. The internal `id` (the rowid) orders the rows for pruning by
age. `change_floor` keeps the highest `seq` pruned from each namespace.

`change_keys` ties each entry row to the `stored` changes that carry its content. A `stored`
change supersedes the entry's earlier copies, which leave the earlier changes as it is logged
(`_supersede`); only a large earlier batch that still carries other entries keeps its copy
and link rather than be rewritten for a few. So a key stored again and again has one link,
not one a store, and deleting it rewrites that change alone (a change left with no link is
written `[]` without being read). A replay so shows each entry's newest value; an
overwritten value is not forgotten, only no longer replayed. Deleting an
entry row that has such changes (a forget, a TTL collection, an expired entry a store replaces,
another tool) queues it in `change_gone` with the newest change then logged (the
`entries_changes_ad` trigger), and logging the `forgotten` or `expired` change of that delete -
in the same transaction - takes its records out of those changes first (`forget_gone`; a row
deleted by another tool, which logs nothing, at the next change logged, whatever its op, or
the next pruning of the log): a replay never shows the content of what was forgotten or
expired, only the `forgotten` or `expired` change. A `stored` change left with no entry stays,
empty (nobody is sent it), so the numbers do not move. The write functions of
`host.store.sqlite.writes` call `log_change` inside their transaction, whoever runs them (the wire
path, the library, the CLI).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Sequence

import msgspec

from host.store.changes import encode_records, without_entries
from host.store.records import Change

__all__ = ["changes_after", "floor", "forget_gone", "head", "heads", "log_change", "prune"]

_PRUNE_BATCH = 1000  # changes one DELETE removes at most
_REWRITE_BYTES = 64 * 1024  # a store rewrites a larger earlier change only when it empties it
_HEAD = ("max(coalesce((SELECT max(seq) FROM changes WHERE namespace = ?1), 0),"
         " coalesce((SELECT seq FROM change_floor WHERE namespace = ?1), 0))")


def log_change(conn: sqlite3.Connection, namespace: str, op: str, records: Sequence[tuple],
               now: float, entry_ids: Sequence[int] | None = None,
               inserted: Collection[int] = ()) -> int:
    """Append one change (inside the caller's transaction); its sequence number. `entry_ids`
    are the rows whose content a `stored` change carries, in record order (looked up when not
    given); the content of rows deleted since the last change (by this write, or by another
    tool since) leaves the log first. `inserted` are those of them this write inserted: no
    earlier change carries them (a row id a delete freed had its links queued in
    `change_gone`, taken out first), so they are not looked up in earlier changes."""
    forget_gone(conn)
    change_id, seq = conn.execute(
        f"INSERT INTO changes (namespace, seq, at, op, entries) VALUES (?1, {_HEAD} + 1, ?2, ?3,"
        " ?4) RETURNING id, seq", (namespace, now, op, encode_records(records))).fetchone()
    if op == "stored":
        if entry_ids is None:
            entry_ids = [r[0] for r in (conn.execute(
                "SELECT id FROM entries WHERE namespace = ? AND tier = ? AND owner = ?"
                " AND key = ?", (namespace, rec[0], rec[1], bytes(rec[2]).decode())).fetchone()
                for rec in records) if r is not None]
            addresses = {i: (rec[0], rec[1], bytes(rec[2])) for i, rec in zip(
                entry_ids, records, strict=False)} if len(entry_ids) == len(records) else {}
        else:
            addresses = {i: (rec[0], rec[1], bytes(rec[2])) for i, rec in zip(
                entry_ids, records, strict=False)}
        _supersede(conn, [i for i in entry_ids if i not in inserted] if inserted else entry_ids,
                   addresses)
        if len(entry_ids) == 1:
            conn.execute("INSERT OR IGNORE INTO change_keys (entry_id, change_id) VALUES (?, ?)",
                         (entry_ids[0], change_id))
        else:
            conn.executemany("INSERT OR IGNORE INTO change_keys (entry_id, change_id)"
                             " VALUES (?, ?)", [(i, change_id) for i in entry_ids])
    return int(seq)


def forget_gone(conn: sqlite3.Connection) -> None:
    """Take the records of the entry rows queued in `change_gone` out of the changes that carry
    them (inside the caller's transaction): one statement for all their links."""
    if conn.execute("SELECT 1 FROM change_gone LIMIT 1").fetchone() is None:
        return
    links = conn.execute(  # the changes logged before its delete
        "DELETE FROM change_keys WHERE (entry_id, change_id) IN (SELECT k.entry_id,"
        " k.change_id FROM change_gone g JOIN change_keys k ON k.entry_id = g.entry_id"
        " AND k.change_id <= g.upto) RETURNING entry_id, change_id").fetchall()
    address = {entry_id: (tier, owner, key.encode()) for entry_id, tier, owner, key in
               conn.execute("DELETE FROM change_gone RETURNING entry_id, tier, owner, key")}
    by_change: dict[int, set[tuple[str, str, bytes]]] = {}
    for entry_id, change_id in links:
        by_change.setdefault(change_id, set()).add(address[entry_id])
    _scrub(conn, by_change)


def _supersede(conn: sqlite3.Connection, entry_ids: Sequence[int],
               addresses: dict[int, tuple[str, str, bytes]]) -> None:
    """Take the earlier copies of the entries a `stored` change now carries out of the earlier
    changes (the newer change supersedes them): each entry row has its links in the one
    `stored` change that last wrote it, so a forget touches one change an entry, however often
    the entry was written. A change larger than `_REWRITE_BYTES` that keeps other entries is
    not rewritten for a few of them (single stores over a large batch would each rewrite it):
    it keeps their links, and a forget scrubs it. An entry without its address here keeps its
    earlier links."""
    ids = [i for i in dict.fromkeys(entry_ids) if i in addresses]
    if not ids:
        return
    earlier: dict[int, list[int]] = {}
    for entry_id, change_id in conn.execute(
            "SELECT entry_id, change_id FROM change_keys WHERE entry_id IN"
            " (SELECT value FROM json_each(?))", (_ids(ids),)):
        earlier.setdefault(change_id, []).append(entry_id)
    if not earlier:
        return
    by_change: dict[int, set[tuple[str, str, bytes]]] = {}
    links: list[tuple[int, int]] = []
    for change_id, size, linked in conn.execute(
            "SELECT c.id, length(c.entries), (SELECT count(*) FROM change_keys k"
            " WHERE k.change_id = c.id) FROM changes c WHERE c.id IN"
            " (SELECT value FROM json_each(?))", (_ids(earlier),)):
        superseded = earlier[change_id]
        if linked > len(superseded) and size > _REWRITE_BYTES:
            continue  # a large change that keeps other entries: it keeps these links too
        by_change[change_id] = {addresses[i] for i in superseded}
        links.extend((i, change_id) for i in superseded)
    if links:
        conn.execute("DELETE FROM change_keys WHERE (entry_id, change_id) IN"
                     " (SELECT value ->> 0, value ->> 1 FROM json_each(?))",
                     (msgspec.json.encode(links),))
    _scrub(conn, by_change)


def _ids(ids: Iterable[int]) -> bytes:
    """A JSON array of row ids, for `json_each`."""
    return msgspec.json.encode(list(ids))


def _scrub(conn: sqlite3.Connection, by_change: dict[int, set[tuple[str, str, bytes]]]) -> None:
    """Take the records at the addresses out of each change (its links already deleted): a
    change left with no link is written `[]` without being read."""
    if not by_change:
        return
    emptied = {r[0] for r in conn.execute(
        "SELECT value FROM json_each(?) WHERE NOT EXISTS (SELECT 1 FROM change_keys"
        " WHERE change_id = value)", (_ids(by_change),))}
    if emptied:
        conn.execute("UPDATE changes SET entries = CAST('[]' AS BLOB) WHERE id IN"
                     " (SELECT value FROM json_each(?))", (_ids(emptied),))
    for change_id, addresses in by_change.items():
        if change_id in emptied:
            continue
        row = conn.execute("SELECT entries FROM changes WHERE id = ?", (change_id,)).fetchone()
        if row is not None:
            conn.execute("UPDATE changes SET entries = ? WHERE id = ?",
                         (without_entries(row[0], addresses), change_id))


def floor(conn: sqlite3.Connection, namespace: str) -> int:
    """The highest sequence pruned from `namespace` (0: none)."""
    row = conn.execute("SELECT seq FROM change_floor WHERE namespace = ?", (namespace,)).fetchone()
    return int(row[0]) if row else 0


def head(conn: sqlite3.Connection, namespace: str) -> int:
    """The newest sequence of `namespace`, or its floor when the log holds none of it."""
    return int(conn.execute(f"SELECT {_HEAD}", (namespace,)).fetchone()[0])


def heads(conn: sqlite3.Connection, namespaces: Sequence[str]) -> dict[str, int]:
    """`head` of each of `namespaces`."""
    return {ns: head(conn, ns) for ns in namespaces}


def changes_after(conn: sqlite3.Connection, namespace: str, after: int, limit: int,
                  max_bytes: int = 0) -> list[Change]:
    """Up to `limit` changes of `namespace` after `after`, in order; with `max_bytes`, none
    after the one that takes their entries to that many bytes."""
    out: list[Change] = []
    size = 0
    for seq, op, entries in conn.execute(
            "SELECT seq, op, entries FROM changes WHERE namespace = ? AND seq > ?"
            " ORDER BY seq LIMIT ?", (namespace, after, limit)):
        out.append(Change(int(seq), op, entries))
        size += len(entries)
        if max_bytes and size >= max_bytes:
            break
    return out


def _raise_floors(conn: sqlite3.Connection, cut: dict[str, int]) -> None:
    conn.executemany(
        "INSERT INTO change_floor (namespace, seq) VALUES (?, ?) ON CONFLICT (namespace)"
        " DO UPDATE SET seq = max(seq, excluded.seq)", list(cut.items()))


def prune(conn: sqlite3.Connection, before: float, max_rows: int) -> int:
    """Delete changes older than `before` and those past the newest `max_rows` of their
    namespace (inside the caller's transaction), raising the floors; the number deleted.
    Their `change_keys` rows go with them (the `changes_ad` trigger); rows deleted by another
    tool since the last logged delete leave the log now."""
    forget_gone(conn)
    cut: dict[str, int] = {}
    n = 0
    while True:
        rows = conn.execute(
            "DELETE FROM changes WHERE id IN (SELECT id FROM changes WHERE at < ?"
            " ORDER BY id LIMIT ?) RETURNING namespace, seq", (before, _PRUNE_BATCH)).fetchall()
        for ns, seq in rows:
            cut[ns] = max(cut.get(ns, 0), seq)
        n += len(rows)
        if len(rows) < _PRUNE_BATCH:
            break
    over = conn.execute("SELECT namespace FROM changes GROUP BY namespace HAVING count(*) > ?",
                        (max_rows,)).fetchall()
    for (ns,) in over:
        (last,) = conn.execute("SELECT seq FROM changes WHERE namespace = ? ORDER BY seq DESC"
                               " LIMIT 1 OFFSET ?", (ns, max_rows)).fetchone()
        n += conn.execute("DELETE FROM changes WHERE namespace = ? AND seq <= ?",
                          (ns, last)).rowcount
        cut[ns] = max(cut.get(ns, 0), last)
    if cut:
        _raise_floors(conn, cut)
    return n
