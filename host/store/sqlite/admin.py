"""Operator tasks on a SQLite store file: stats, export rows, import batches, backup, vacuum, GC.

The CLI's `stats`, `export`, `import`, `backup`, `vacuum` and `gc` call these; they run in
their own process beside a serving host (WAL lets readers and one writer at a time share the
file; a write waits up to the busy timeout for the host's writer). Imports write through
`sqlite.writes.put_entries`, the same function as the wire path, one transaction a batch.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from host.store.admin import ExportRow, NamespaceStats
from host.store.growth import UsageSummary
from host.store.records import NewEntry, Quotas, Scope, StoreOutcome
from host.store.sqlite import usage as sqlite_usage
from host.store.sqlite import writes
from host.store.sqlite.schema import connect, migrate, write_transaction

__all__ = [
    "ExportRow",
    "NamespaceStats",
    "SQLiteAdmin",
    "backup",
    "collect_all_expired",
    "count_by_tier",
    "database_bytes",
    "export_rows",
    "import_batch",
    "open_store_file",
    "stats",
    "vacuum",
]


def open_store_file(path: str, create: bool = False) -> sqlite3.Connection:
    """A connection to the store at `path`, schema migrated. Raises `FileNotFoundError` when
    the file does not exist and `create` is false (a typo must not create an empty store)."""
    if not create and not Path(path).exists():
        raise FileNotFoundError(f"no database at {path}")
    conn = connect(path)
    migrate(conn)
    return conn


_LIVE = "(expires_at IS NULL OR expires_at > ?)"  # its one parameter: now


def stats(conn: sqlite3.Connection, now: float) -> list[NamespaceStats]:
    """Live entries and bytes by namespace and tier, ordered by namespace then tier."""
    rows = conn.execute(
        f"SELECT namespace, tier, count(*), coalesce(sum(size), 0) FROM entries WHERE {_LIVE}"
        " GROUP BY namespace, tier ORDER BY namespace, tier",
        (now,),
    ).fetchall()
    return [NamespaceStats(*r) for r in rows]


def count_by_tier(conn: sqlite3.Connection, now: float) -> dict[str, int]:
    """Live persisted entries by tier (a scan of the table: call it rarely)."""
    rows = conn.execute(
        f"SELECT tier, count(*) FROM entries WHERE {_LIVE} GROUP BY tier", (now,)
    ).fetchall()
    return {tier: n for tier, n in rows}


def database_bytes(path: str) -> int:
    """Bytes the store takes on disk: the file plus its WAL and shared-memory files."""
    return sum(
        os.path.getsize(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p)
    )


def export_rows(
    conn: sqlite3.Connection, now: float, namespace: str | None = None
) -> tuple[int, Generator[ExportRow]]:
    """(how many, an iterator of) the live entries, optionally of one namespace, in id order.

    The iterator reads inside one read transaction, so the export is one consistent snapshot
    even while a host writes; consume it fully (or close it) to end the transaction.
    """
    where = _LIVE
    args: list[object] = [now]
    if namespace is not None:
        where += " AND namespace = ?"
        args.append(namespace)
    conn.execute("BEGIN")
    total = conn.execute(f"SELECT count(*) FROM entries WHERE {where}", args).fetchone()[0]

    def rows() -> Generator[ExportRow]:
        try:
            cur = conn.execute(
                "SELECT namespace, tier, owner, agent, key, content, tags, source, score, ttl,"
                f" created_at, updated_at, valid_from, valid_until FROM entries WHERE {where}"
                " ORDER BY id",
                args,
            )
            while batch := cur.fetchmany(1000):
                for r in batch:
                    yield ExportRow(*r)
        finally:
            conn.execute("COMMIT")

    return total, rows()


def import_batch(
    conn: sqlite3.Connection,
    batch: Sequence[tuple[Scope, NewEntry]],
    now: float,
    quotas: Quotas,
) -> list[StoreOutcome]:
    """Upsert `batch` in one transaction through `put_entries` (the wire path's function).

    Entries keep their `created_at`/`updated_at`; one outcome per entry, in order.
    """
    outcomes: list[StoreOutcome] = []
    with write_transaction(conn):
        # consecutive entries of one scope go in one call
        for scope, run in itertools.groupby(batch, key=lambda item: item[0]):
            outcomes += writes.put_entries(conn, scope, [e for _s, e in run], now, quotas)
    return outcomes


def collect_all_expired(conn: sqlite3.Connection, now: float) -> int:
    """Delete every expired entry, a transaction each `GC_BATCH`; the number deleted."""
    total = 0
    while True:
        with write_transaction(conn):
            n = writes.collect_expired(conn, now)
        total += n
        if n < writes.GC_BATCH:
            return total


def backup(
    src: str, dest: str, progress: Callable[[int, int], None] | None = None
) -> None:
    """Copy the store at `src` to `dest` with SQLite's online backup API, while it serves.

    The copy is one consistent snapshot: it runs in a single step, holding a read transaction
    (in WAL mode writers go on meanwhile; a stepped copy would restart at every write of the
    serving host and might never finish). It is written to `dest` + ".partial", checked
    (`PRAGMA quick_check`) and renamed, so `dest` only ever holds a complete backup.
    `progress(done_pages, total_pages)` is called when the copy is done.
    Raises `FileNotFoundError` if `src` does not exist, `sqlite3.DatabaseError` if the copy fails.
    """
    source = open_store_file(src)
    tmp = dest + ".partial"
    if os.path.exists(tmp):
        os.remove(tmp)
    try:
        target = sqlite3.connect(tmp)
        try:
            source.backup(target, pages=-1, progress=(lambda _s, rem, tot: progress(tot - rem, tot))
                          if progress else None)
            check = target.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"backup failed its check: {check}")
            # a backup is one self-contained file: no WAL beside it
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        source.close()


def vacuum(path: str) -> None:
    """Rebuild the file to reclaim free pages and checkpoint the WAL into it.

    Writers (a serving host included) wait while it runs; run it at a quiet time.
    """
    conn = open_store_file(path)
    try:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


class SQLiteAdmin:
    """`host.store.admin.StoreAdmin` on an open store file (`open_store_file`), the caller's to
    close; imports apply `quotas`."""

    def __init__(self, conn: sqlite3.Connection, path: str, quotas: Quotas) -> None:
        self.conn = conn
        self.where = path
        self.quotas = quotas

    async def stats(self, now: float) -> list[NamespaceStats]:
        return stats(self.conn, now)

    async def quota_usage(self, quotas: Quotas, top: int) -> UsageSummary | None:
        return sqlite_usage.quota_usage(self.conn, quotas, top)

    async def database_bytes(self) -> int:
        return database_bytes(self.where)

    async def embed_backlog(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0])

    async def collect_garbage(self, now: float) -> int:
        return collect_all_expired(self.conn, now)

    @asynccontextmanager
    async def export_rows(
        self, now: float, namespace: str | None = None
    ) -> AsyncIterator[tuple[int, AsyncIterator[ExportRow]]]:
        total, rows = export_rows(self.conn, now, namespace)

        async def each() -> AsyncIterator[ExportRow]:
            for row in rows:
                yield row

        try:
            yield total, each()
        finally:
            rows.close()  # ends the read transaction, consumed or not

    async def import_batch(
        self, batch: Sequence[tuple[Scope, NewEntry]], now: float
    ) -> list[StoreOutcome]:
        return import_batch(self.conn, batch, now, self.quotas)
