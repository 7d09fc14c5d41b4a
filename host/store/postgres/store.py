"""`PostgresEntryStore`: the persistent tiers on PostgreSQL, shared by any number of hosts.

Selected by a `store.db` (or `--db`) starting with `postgresql://` or `postgres://`. Needs the
`postgres` extra (`pip install -e '.[postgres]'`, which brings asyncpg).

The same `EntryStore` contract as `SQLiteEntryStore`, over an asyncpg pool:
- Puts, forgets and touches are group-committed (`host.store.postgres.batch`): those queued
  while earlier batches run go as one statement (`a2e_put_batch` / `a2e_forget_batch` /
  `a2e_touch_batch`, see
  `host.store.postgres.schema`) in autocommit; the server writes each under its namespace's
  advisory lock and commits before the reply comes back, so a write is acknowledged only once
  it is committed, and a retrieve through any other host sees it at once (reads run at READ
  COMMITTED on the primary).
- Quotas are counted from `a2e_usage` inside that transaction; the namespace lock serialises the
  writers of one namespace across hosts, so concurrent writers can never overshoot a quota.
- Keyword search matches the `lexemes` tsvector (GIN index) within the namespace's scope
  lexeme and scores candidates with SQLite FTS5's BM25 over the namespace's statistics
  (`keyword`); `relevance` is `host.text.keyword.coverage`, as in the SQLite store, so the
  search engine ranks both backends alike.
- TTL: reads hide expired rows; `collect_garbage` deletes them on one host at a time
  (`pg_try_advisory_lock`), namespace by namespace under each namespace's lock.
- Vectors (`host.store.base.VectorSearch`): the hosts' embedding workers claim queued entries
  (`claim_vectors`, `FOR UPDATE SKIP LOCKED` and a lease) and write their vectors
  (`put_vectors`) into `a2e_vectors`; the search engine asks `nearest_vectors` for a query's
  neighbours within the reader's visibility (an HNSW index per dimension when pgvector is
  present: `vectors_available`), so every host searches every vector at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from host.extras import require
from host.lifecycle import Opens
from host.store import filters
from host.store.base import (
    BrowsedEntry,
    BrowseFilter,
    Hits,
    NamespaceOverview,
    NewEntry,
    Pending,
    Query,
    Quotas,
    Refusal,
    Scope,
    StorageFull,
    StoredEntry,
    StoreOutcome,
    owner_for,
    scope_token,
    stored_bytes,
)
from host.store.changes import Change
from host.store.postgres import browse as pg_browse
from host.store.postgres import extensions as pg_ext
from host.store.postgres import filters as pg_filters
from host.store.postgres.batch import BatchError, PendingWrite, WriteBatcher
from host.store.postgres.schema import (
    LOCK_CLASS,
    LOCK_GC,
    LOCK_MIGRATE,
    advisory_lock,
    enable_vectors,
    ensure_vector_index,
    migrate,
)
from host.text.bm25 import Analysis, Bm25Stats
from host.text.keyword import coverage, query_terms, tokens
from host.text.searchable import stored_text

__all__ = ["PostgresEntryStore", "is_postgres_url", "lexemes_of"]

log = logging.getLogger("a2e_host.store")
DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode

_COLUMNS = ("e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl,"
            " e.created_at, e.updated_at")
_MAX_LEXEME_BYTES = 2046  # PostgreSQL's limit for one tsvector lexeme is 2047 bytes
_MAX_LEXEMES_BYTES = 900_000  # and 1 MiB for all of them; a store entry is far below
_GC_BATCH = 1000
_VECTOR_LOCK_TIMEOUT_MS = 100  # longest a background vector write waits on a row lock


def is_postgres_url(db: str) -> bool:
    """True when `db` names a PostgreSQL database rather than a SQLite file."""
    return db.startswith(("postgresql://", "postgres://"))


def _scope_lexeme(namespace: str) -> str:
    """The lexeme every entry of `namespace` carries; no query token can equal it ("_")."""
    return "_" + scope_token(namespace)


def lexemes_of(namespace: str, text: str) -> str:
    """The tsvector literal stored for an entry: the scope lexeme, then each distinct token of
    `text` (`host.text.keyword.tokens`) with one position per occurrence (1..tf, at most
    256), so that BM25 can read term counts; tokens past PostgreSQL's lexeme limits are left
    out. Tokens are letters and digits only, so quoting them is safe."""
    return _lexemes(namespace, text)[0]


def _lexemes(namespace: str, text: str) -> tuple[str, int]:
    """`lexemes_of` and the entry's token count as BM25 reads it (`doc_len`: the positions
    stored plus one for the scope lexeme, as `a2e_doc_len` counts them)."""
    out = [f"'{_scope_lexeme(namespace)}'"]
    total = len(out[0])
    doc_len = 1
    for t, k in _lexeme_counts(text).items():
        total += len(t.encode()) + 2 * k + 4
        if total > _MAX_LEXEMES_BYTES:
            break
        out.append(f"'{t}':" + ",".join(map(str, range(1, k + 1))))
        doc_len += k
    return " ".join(out), doc_len


def _text_array(values: Sequence[str]) -> str:
    """A PostgreSQL array literal of `values` (each quoted: any text but NUL is safe)."""
    return "{" + ",".join(
        '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def stored_size(e: NewEntry) -> int:
    """The bytes an entry counts against the byte quotas (`host.store.base.stored_bytes`, as
    on SQLite)."""
    return stored_bytes(e.key, e.content, e.tags) + len(e.vectors)


def _lexeme_counts(text: str) -> dict[str, int]:
    """Each distinct token of `text` that fits in a lexeme, with its count capped at 256 (the
    positions `lexemes_of` stores), in order of first occurrence."""
    return {t: min(n, 256) for t, n in Counter(tokens(text)).items()
            if len(t.encode()) <= _MAX_LEXEME_BYTES}


def _row(r: Any, id: int | None = None) -> StoredEntry:
    """The entry of a row of `_COLUMNS`, with the row id `id` when given."""
    return StoredEntry(
        tier=r[0], owner=r[1], key=r[2].encode(), content=r[3].encode(), tags=list(r[4]),
        source=r[5], score=r[6], ttl=r[7], created_at=r[8], updated_at=r[9], id=id,
    )


class _Params:
    """Collects query arguments; calling it with a value returns its `$n` placeholder."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def _where(scope: Scope, q: Query, now: float, p: _Params) -> str:
    """The WHERE clause of a read: namespace, visibility, liveness, keys, tags."""
    vis = [f"(e.tier = {p(t)} AND e.owner = {p(owner_for(t, scope.agent))})" for t in q.tiers]
    sql = (f"e.namespace = {p(scope.namespace)} AND ({' OR '.join(vis) or 'false'})"
           f" AND (e.expires_at IS NULL OR e.expires_at > {p(now)})")
    if q.keys:
        keys = p([k.decode() for k in q.keys])
        sql += (f" AND a2e_key_hash(e.key) = ANY(ARRAY(SELECT"
                f" a2e_key_hash(k) FROM unnest({keys}::text[]) k))"
                f" AND e.key = ANY({keys}::text[])")
    if q.tags:
        sql += f" AND e.tags @> {p(list(dict.fromkeys(q.tags)))}::text[]"
    if q.where or q.key_prefix:  # the store extensions' filters (postgres/filters.py)
        sql += pg_filters.where_sql(q.where, q.key_prefix, p)
    return sql


def _addresses(scope: Scope, tiers: Sequence[str], keys: Sequence[bytes]) -> dict[str, Any]:
    """The entries `scope` addresses under `keys` in `tiers`, as the JSON fields
    `a2e_forget_batch` and `a2e_touch_batch` read (namespace, tiers, owners, keys)."""
    return {"namespace": scope.namespace, "tiers": list(tiers),
            "owners": [owner_for(t, scope.agent) for t in tiers],
            "keys": [k.decode() for k in keys]}


def _visibility(scope: Scope, q: Query) -> tuple[list[str], list[str], list[str], list[str]]:
    """What `q` lets `scope` read, as the SQL functions take it: tiers, their owners, keys
    (text), distinct tags."""
    return (list(q.tiers), [owner_for(t, scope.agent) for t in q.tiers],
            [k.decode() for k in q.keys], list(dict.fromkeys(q.tags)))


def _indexable(terms: Sequence[str]) -> list[str]:
    return [t for t in terms if len(t.encode()) <= _MAX_LEXEME_BYTES]


async def _keep_session(conn: Any) -> None:
    """A pooled connection's reset on release: nothing to send. asyncpg's default sends
    `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` every release, a round trip
    after every statement; this store leaves none of those behind (session advisory locks are
    released in `finally`, settings are SET LOCAL), and asyncpg still rolls back an open
    transaction before calling this."""


class PostgresEntryStore(Opens):
    """The `EntryStore` on one PostgreSQL database. Use `async with` or `open()`/`close()`."""

    reads_on_loop = False  # asyncpg awaits under asyncio.timeout, which needs a task

    def __init__(
        self,
        url: str,
        quotas: Quotas | None = None,
        pool_min: int = 1,
        pool_max: int = 10,
        gc_batch: int = _GC_BATCH,
        batch_max: int = 512,
        max_term_docs: int = 0,
        max_matches: int = 0,
    ) -> None:
        self.url = url
        self.batch_max = batch_max
        self.max_term_docs = max_term_docs  # see search
        self.max_matches = max_matches
        self._puts: WriteBatcher | None = None
        self._forgets: WriteBatcher | None = None
        self._touches: WriteBatcher | None = None
        self.quotas = quotas or Quotas()
        self.pool_min = pool_min
        self.pool_max = max(pool_max, pool_min)
        self.gc_batch = gc_batch
        self.vectors_available = False
        self._pool: Any = None
        self._listener: Any = None  # the LISTEN connection of `listen_changes`
        self._indexed_dims: set[int] = set()

    async def open(self) -> None:
        """Connect the pool, apply pending migrations (under an advisory lock), enable pgvector
        when available. Raises `MissingExtra` if asyncpg is missing, asyncpg/OS errors if the
        database cannot be reached."""
        asyncpg = require("asyncpg", "postgres", "a postgresql:// store.db")  # an extra
        pool = await asyncpg.create_pool(
            self.url, min_size=self.pool_min, max_size=self.pool_max,
            # hnsw.iterative_scan: pgvector's HNSW scans go on past filtered-out rows (the
            # visibility WHERE of nearest_vectors); a placeholder where pgvector is absent
            server_settings={"application_name": "a2e-host",
                             "hnsw.iterative_scan": "relaxed_order"},
            reset=_keep_session,
        )
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
                self.vectors_available = await enable_vectors(conn)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool
        self._puts = WriteBatcher(self._put_batch, self.batch_max)
        self._forgets = WriteBatcher(self._forget_batch, self.batch_max)
        self._touches = WriteBatcher(self._touch_batch, self.batch_max)

    async def close(self) -> None:
        """Commit the queued puts, wait for in-flight queries, close every connection.
        Idempotent."""
        for batcher in (self._puts, self._forgets, self._touches):
            if batcher is not None:
                await batcher.close()
        self._puts = self._forgets = self._touches = None
        if self._listener is not None:
            listener, self._listener = self._listener, None
            await listener.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def pool(self) -> Any:
        """The asyncpg pool (for `host.store.postgres.admin`). Raises `RuntimeError` if the
        store is not open."""
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool

    # -- writes -------------------------------------------------------------------------

    async def put(self, scope: Scope, entries: Sequence[NewEntry], now: float) -> list[StoreOutcome]:
        """Upsert `entries` in one transaction (with other puts of this host: group commit);
        returns after COMMIT. Raises `ValueError` for a NUL character in a tag or source
        (PostgreSQL text cannot hold one), `BatchError` if the database refused the put.
        Entries with client vectors (`host.store.postgres.extensions`): those of another
        dimension than their space are `Refusal.VECTOR_DIMS`; the others' vectors are written
        after the entries' commit."""
        if not any(e.vectors for e in entries):
            return await self._put(scope, entries, now)
        fits = await pg_ext.spaces_fit(self.pool, scope.namespace, entries)
        kept = [e for e, ok in zip(entries, fits) if ok]
        done = iter(await self._put(scope, kept, now) if kept else [])
        outcomes: list[StoreOutcome] = [next(done) if ok else Refusal.VECTOR_DIMS for ok in fits]
        await pg_ext.write_vectors(self.pool, scope, [
            e for e, ok, o in zip(entries, fits, outcomes) if ok and o is None])
        return outcomes

    async def client_vectors(self, scope: Scope, q: Query, space: str, now: float
                             ) -> tuple[int, list[tuple[int, np.ndarray]]]:
        """The dimension of `space` (0: none) and the readable entries' vectors in it."""
        p = _Params()
        where = _where(scope, q, now, p)
        return await pg_ext.read_vectors(self.pool, scope.namespace, space, where, p, p.values)

    async def _put(self, scope: Scope, entries: Sequence[NewEntry], now: float
                   ) -> list[StoreOutcome]:
        if not entries:
            return []
        rows: list[tuple[Any, ...]] = []
        for e in entries:
            if any("\x00" in t for t in e.tags) or "\x00" in e.source:
                raise ValueError("PostgreSQL text cannot hold a NUL character (in a tag or source)")
            text = e.text or stored_text(e.content, e.tags, e.key)
            lexemes, doc_len = _lexemes(scope.namespace, text)
            rows.append((
                e.tier, owner_for(e.tier, scope.agent), e.key.decode(), e.content.decode(),
                _text_array(list(dict.fromkeys(e.tags))), e.source, float(e.score),
                int(e.ttl), e.created_at, e.updated_at, lexemes, stored_size(e), doc_len,
            ))
        if self._puts is None:
            raise RuntimeError("store is not open")
        try:
            return await self._puts.submit(scope, now, rows, len(entries))  # type: ignore[no-any-return]
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != DISK_FULL:
                raise
            # the server's disk: the same answer as SQLite's
            raise StorageFull(f"the PostgreSQL server's disk is full: {exc}") from exc

    async def _put_batch(self, batch: list[PendingWrite]) -> list[list[StoreOutcome] | BatchError]:
        """Run queued puts (sorted by namespace) as one `a2e_put_group` statement: entry by
        entry columns, each entry with its request's number, namespace, agent and time, and
        its round (k for the k-th entry of the batch at its address)."""
        cols: list[list[Any]] = [[] for _ in range(18)]
        seen: dict[tuple[str, str, str, str], int] = {}
        for j, put in enumerate(batch, start=1):
            ns, agent = put.scope.namespace, put.scope.agent
            for row in put.args:
                address = (ns, row[0], row[1], row[2])
                k = seen[address] = seen.get(address, 0) + 1
                for col, v in zip(cols, (j, k, ns, agent, put.now, *row), strict=True):
                    col.append(v)
        q = self.quotas
        # The only rows a put deletes are expired ones (an expired entry it replaces, the
        # expired entries it collects to fit a quota): the change log records them as
        # `expired`, before the put's `stored` change, as on SQLite. The CTE (volatile, so
        # evaluated first) names the op for the statement's transaction.
        outcomes = await self.pool.fetchval(
            "WITH op AS (SELECT set_config('a2e.change_op', 'expired', true))"
            " SELECT a2e_put_group_logged($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
            " $13, $14, $15, $16, $17, $18, $19) FROM op",
            [q.max_entries_per_namespace, q.max_entries_per_agent, q.max_bytes_per_namespace,
             q.max_bytes_per_agent],
            *cols,
        )
        results: list[list[StoreOutcome] | BatchError] = []
        first = 0
        for put in batch:
            mine = list(outcomes[first:first + put.size])
            first += put.size
            failed = next((o for o in mine if o and o.startswith("error: ")), None)
            results.append(BatchError(failed[7:]) if failed
                           else [None if o is None else Refusal(o) for o in mine])
        return results

    async def forget(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], tags: Sequence[str],
        now: float,
    ) -> int:
        """Delete the live entries matching keys AND tags in `tiers`; returns after COMMIT
        (forgets queued together share a transaction: group commit)."""
        if self._forgets is None:
            raise RuntimeError("store is not open")
        args = {**_addresses(scope, tiers, keys), "tags": list(dict.fromkeys(tags)), "now": now}
        return await self._forgets.submit(scope, now, args)  # type: ignore[no-any-return]

    async def _forget_batch(self, batch: list[PendingWrite]) -> list[int | BatchError]:
        """Run queued forgets (sorted by namespace) as one `a2e_forget_batch` statement."""
        out = await self.pool.fetchval("SELECT a2e_forget_batch_logged($1::text::jsonb)",
                                       _encode([w.args for w in batch]).decode())
        return [BatchError(r[7:]) if r.startswith("error: ") else int(r) for r in out]

    async def touch(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], when: float
    ) -> int:
        """Record a read (`EntryStore.touch`): move `updated_at` of the live entries under
        `keys` forward to `when`, nothing else (expiry included), under the namespace's lock;
        the number moved. Returns after COMMIT (touches queued together share a transaction:
        group commit)."""
        if self._touches is None:
            raise RuntimeError("store is not open")
        if not keys or not tiers:
            return 0
        args = {**_addresses(scope, tiers, keys), "when": when}
        return await self._touches.submit(scope, when, args, len(keys))  # type: ignore[no-any-return]

    async def _touch_batch(self, batch: list[PendingWrite]) -> list[int]:
        """Run queued touches (sorted by namespace) as one `a2e_touch_batch` statement."""
        out = await self.pool.fetchval("SELECT a2e_touch_batch($1::text::jsonb)",
                                       _encode([w.args for w in batch]).decode())
        return [int(n) for n in out]

    async def collect_garbage(self, now: float) -> int:
        """Delete expired entries if no other host is collecting (`pg_try_advisory_lock`);
        the number deleted (0 when another host holds the lock)."""
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, LOCK_GC):
                log.debug("gc skipped: another host is collecting")
                return 0
            try:
                return await self._collect(conn, now)
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, LOCK_GC)

    async def _collect(self, conn: Any, now: float) -> int:
        namespaces = await conn.fetch(
            "SELECT DISTINCT namespace FROM a2e_entries"
            " WHERE expires_at IS NOT NULL AND expires_at <= $1", now)
        total = 0
        for (ns,) in namespaces:
            while True:
                async with conn.transaction():
                    await conn.execute("SELECT a2e_lock_namespace($1),"
                                       " set_config('a2e.change_op', 'expired', true)", ns)
                    status = await conn.execute(
                        "DELETE FROM a2e_entries WHERE id IN (SELECT id FROM a2e_entries"
                        " WHERE namespace = $1 AND expires_at IS NOT NULL AND expires_at <= $2"
                        " LIMIT $3)", ns, now, self.gc_batch)
                n = int(status.split()[-1])
                total += n
                if n < self.gc_batch:
                    break
        return total

    # -- the change log (host.store.changes.ChangeLog; the SQL is migration 10) -----------

    async def change_head(self, namespace: str) -> int:
        """The newest change of `namespace` (at least its floor)."""
        return int(await self.pool.fetchval(
            "SELECT coalesce((SELECT seq FROM a2e_change_heads WHERE namespace = $1), 0)",
            namespace))

    async def change_heads(self, namespaces: Sequence[str]) -> dict[str, int]:
        """`change_head` of each namespace, in one query."""
        rows = await self.pool.fetch(
            "SELECT namespace, seq FROM a2e_change_heads WHERE namespace = ANY($1::text[])",
            list(namespaces))
        heads = dict.fromkeys(namespaces, 0)
        heads.update((r[0], int(r[1])) for r in rows)
        return heads

    async def change_floor(self, namespace: str) -> int:
        """The highest change pruned from `namespace`."""
        return int(await self.pool.fetchval(
            "SELECT coalesce((SELECT floor FROM a2e_change_heads WHERE namespace = $1), 0)",
            namespace))

    async def changes_after(self, namespace: str, after: int, limit: int,
                            max_bytes: int = 0) -> list[Change]:
        """Up to `limit` changes of `namespace` after `after`, in order; with `max_bytes`,
        none after the one that takes their entries to that many bytes."""
        if max_bytes:
            rows = await self.pool.fetch(
                "SELECT seq, op, entries FROM (SELECT seq, op, entries, sum(octet_length(entries))"
                " OVER (ORDER BY seq) - octet_length(entries) AS before FROM a2e_changes"
                " WHERE namespace = $1 AND seq > $2 ORDER BY seq LIMIT $3) c"
                " WHERE before < $4 ORDER BY seq", namespace, after, limit, max_bytes)
        else:
            rows = await self.pool.fetch(
                "SELECT seq, op, entries FROM a2e_changes WHERE namespace = $1 AND seq > $2"
                " ORDER BY seq LIMIT $3", namespace, after, limit)
        return [Change(int(r[0]), r[1], r[2].encode()) for r in rows]

    async def listen_changes(self, notify: Callable[[str], None]) -> None:
        """Call `notify(namespace)` ("" = any) when a change commits, through any host:
        LISTEN on `a2e_changes` over a connection of its own (closed by `close()`)."""
        import asyncpg

        conn = await asyncpg.connect(self.url, server_settings={"application_name": "a2e-host"})
        await conn.add_listener("a2e_changes", lambda _c, _pid, _ch, payload: notify(payload))
        self._listener = conn

    async def prune_changes(self, before: float, max_rows: int) -> int:
        """Delete changes older than `before` or past `max_rows` a namespace."""
        return int(await self.pool.fetchval("SELECT a2e_prune_changes($1, $2)", before,
                                            max_rows))

    # -- reads --------------------------------------------------------------------------

    async def find(self, scope: Scope, q: Query, now: float) -> tuple[list[StoredEntry], int]:
        """Entries matching `q`, best stored score first, then newest; (page, total)."""
        p = _Params()
        where = _where(scope, q, now, p)
        if q.min_score > 0:
            where += f" AND e.score >= {p(q.min_score)}"
        rows = await self.pool.fetch(
            f"SELECT {_COLUMNS}, count(*) OVER () FROM a2e_entries e WHERE {where}"
            f" ORDER BY e.score DESC, e.updated_at DESC LIMIT {p(q.limit)}"
            f" OFFSET {p(q.offset)}",
            *p.values,
        )
        if not rows and q.offset:  # a page past the end still counts the matches
            total = await self.pool.fetchval(
                f"SELECT count(*) FROM a2e_entries e WHERE {where}", *p.values[:-2])
            return [], int(total)
        total = rows[0][10] if rows else 0
        return [_row(r) for r in rows], total

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int
    ) -> list[StoredEntry]:
        """Keyword candidates for `text`, best BM25 first (FTS5's formula over the namespace's
        statistics), each with `keyword` (BM25), `id` and `relevance`
        (`host.search.keyword.coverage` of the terms searched, as on SQLite); at most
        `candidates`. Terms in more than `max_term_docs` entries are left out (0: none); only
        the newest `max_matches` matches the reader may read are scored (0: all). One
        statement (`a2e_keyword_search`): term counts, candidates, visibility and rows."""
        terms = _indexable(query_terms(text))
        if not terms or not q.tiers:
            return []
        tiers, owners, keys, tags = _visibility(scope, q)
        rows = await self.pool.fetch(
            "SELECT * FROM a2e_keyword_search($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            scope.namespace, _scope_lexeme(scope.namespace), terms, self._cap(terms),
            self.max_matches or None, candidates, tiers, owners, now, keys, tags)
        out = []
        for r in rows:
            entry = _row(r, r[10])
            if (q.where or q.key_prefix) and not filters.matches(
                    _decode(entry.content), _decode(entry.key), q.where, q.key_prefix):
                continue  # a2e_keyword_search applies keys and tags; the extensions' here
            entry.keyword = r[11]
            entry.relevance = coverage(tuple(r[13]), " ".join(r[12]))
            out.append(entry)
        return out

    # -- the store extensions (host.store.base.StoreExtensions) ------------------------------

    async def refresh(self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes],
                      now: float) -> int:
        """Restart the TTL of the live entries under `keys` that have one (they expire `ttl`
        seconds after `now`); how many. Returns after COMMIT."""
        if not keys or not tiers:
            return 0
        p = _Params()
        where = _where(scope, Query(tiers=tuple(tiers), keys=tuple(keys)), now, p)
        status = await self.pool.execute(
            f"UPDATE a2e_entries e SET expires_at = {p(now)}::float8 + e.ttl WHERE {where}"
            " AND e.ttl > 0", *p.values)
        return int(status.split()[-1])

    async def sweep(self, scope: Scope, tiers: Sequence[str], now: float) -> int:
        """Delete the expired entries of `scope`'s namespace it may see in `tiers` (logged as
        `expired`, under the namespace's lock); how many. Returns after COMMIT."""
        if not tiers:
            return 0
        p = _Params()
        vis = " OR ".join(f"(tier = {p(t)} AND owner = {p(owner_for(t, scope.agent))})"
                          for t in tiers)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT a2e_lock_namespace($1),"
                               " set_config('a2e.change_op', 'expired', true)",
                               scope.namespace)
            status = await conn.execute(
                f"DELETE FROM a2e_entries WHERE namespace = {p(scope.namespace)} AND ({vis})"
                f" AND expires_at IS NOT NULL AND expires_at <= {p(now)}", *p.values)
        return int(status.split()[-1])

    async def key_paths(self, scope: Scope, q: Query, field: str, prefix: Sequence[str],
                        now: float) -> list[bytes]:
        """The distinct JSON arrays under key member `field` that `q` lets `scope` read, with
        `prefix`'s elements ("*": any) leading."""
        if any("\x00" in el for el in prefix):
            return []  # no key read here holds U+0000 (postgres/filters.py)
        p = _Params()
        where = _where(scope, q, now, p)
        member = f"({pg_filters.KEY} -> {p(field)}::text)"
        extra = "".join(f" AND ({member} -> {i}) = to_jsonb({p(el)}::text)"
                        for i, el in enumerate(prefix) if el != "*")
        rows = await self.pool.fetch(
            f"SELECT DISTINCT {member}::text FROM a2e_entries e WHERE {where}"
            f" AND jsonb_typeof({member}) = 'array'{extra}", *p.values)
        return [r[0].encode() for r in rows]

    def _cap(self, terms: Sequence[str]) -> int:
        """`max_term_docs` for a query of `terms` (a single term is always searched: 0)."""
        return self.max_term_docs if len(terms) >= 2 else 0

    async def keyword_stats(
        self, scope: Scope, text: str, q: Query | None = None, now: float | None = None
    ) -> Bm25Stats:
        """The namespace's keyword statistics for the query `text`, as `search` scores it
        (see `host.search.bm25`): rows, average length, rows holding each term searched. With
        the read's `q` and time `now`, a term is common (and left out) as `search` decides it,
        among the entries the reader may read; without, among the namespace's."""
        usable = _indexable(query_terms(text))
        vis = _visibility(scope, q) if q is not None else (None, None, [], [])
        row = await self.pool.fetchrow(
            "SELECT u.entries, u.tokens, t.terms, t.hits FROM (SELECT array_agg(s.term ORDER BY"
            " s.ord) AS terms, array_agg(s.hits ORDER BY s.ord) AS hits FROM"
            " a2e_search_terms($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            " WITH ORDINALITY AS s(term, hits, ord)) t"
            " LEFT JOIN a2e_usage u ON u.namespace = $1 AND u.agent = ''",
            scope.namespace, _scope_lexeme(scope.namespace), usable, self._cap(usable), vis[0],
            vis[1], now if now is not None else 0.0, vis[2], vis[3])
        n, length = max(row[0] or 0, 1), max(row[1] or 0, 1)
        return Bm25Stats(tuple(row[2] or ()), tuple(int(h) for h in row[3] or ()), n, length / n)

    def analyse(self, text: str) -> Analysis:
        """`text` as the keyword index holds it (its distinct tokens with counts, capped at 256
        as `lexemes_of` stores them; length plus the scope lexeme)."""
        terms = _lexeme_counts(text)
        return Analysis(terms, sum(terms.values()) + 1)

    async def count_by_tier(self, now: float) -> dict[str, int]:
        """Live entries by tier (a scan: the metrics endpoint calls it at most every few
        seconds)."""
        rows = await self.pool.fetch(
            "SELECT tier, count(*) FROM a2e_entries"
            " WHERE expires_at IS NULL OR expires_at > $1 GROUP BY tier", now)
        return {r[0]: int(r[1]) for r in rows}

    # -- the memory browser (host/ui; `base.Browse`, the SQL is in postgres/browse.py) --------

    async def overview(self, namespaces: Sequence[str] | None, now: float
                       ) -> list[NamespaceOverview]:
        """The namespaces with live entries, by name (`base.Browse.overview`)."""
        return await pg_browse.overview(self.pool, namespaces, now)

    async def browse(self, namespace: str, f: BrowseFilter, now: float
                     ) -> tuple[list[BrowsedEntry], int]:
        """Live entries of `namespace` matching `f`, newest first (`base.Browse.browse`)."""
        return await pg_browse.browse(self.pool, namespace, f, now)

    async def browse_entry(self, namespace: str, id: int, now: float) -> BrowsedEntry | None:
        """The live entry `id` of `namespace`, or None."""
        return await pg_browse.browse_entry(self.pool, namespace, id, now)

    async def export_namespace(self, namespace: str, now: float, after: int = 0,
                               limit: int = 1000) -> list[BrowsedEntry]:
        """A page of the live entries of `namespace`: row ids above `after`, in order."""
        return await pg_browse.export_namespace(self.pool, namespace, now, after, limit)

    async def ready(self) -> bool:
        """True when the database answers."""
        try:
            async with asyncio.timeout(5.0):
                return bool(await self.pool.fetchval("SELECT 1") == 1)
        except Exception:  # unreachable, timed out, closed: not ready
            return False

    # -- vectors ------------------------------------------------------------------------

    async def set_vector_model(self, name: str, dim: int) -> bool:
        """Record the embedder in `a2e_search_meta` (under the migration lock, so hosts
        starting together agree). A different model than recorded deletes every vector and
        queues every entry for re-embedding; True when that happened."""
        async with (self.pool.acquire() as conn, advisory_lock(conn, LOCK_MIGRATE),
                    conn.transaction()):
            rows = dict(await conn.fetch(
                "SELECT name, value FROM a2e_search_meta WHERE name IN ('model', 'dim')"))
            if rows == {"model": name, "dim": str(dim)}:
                return False
            await conn.execute("DELETE FROM a2e_vectors")
            await self._requeue(conn)
            await conn.executemany(
                "INSERT INTO a2e_search_meta (name, value) VALUES ($1, $2)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                [("model", name), ("dim", str(dim))])
            return True

    @staticmethod
    async def _requeue(conn: Any) -> None:
        await conn.execute(
            "INSERT INTO a2e_embed_queue AS q (entry_id) SELECT id FROM a2e_entries"
            " ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0")

    async def requeue_vectors(self) -> int:
        """Queue every entry for re-embedding (releasing every claim); the queue's length."""
        async with self.pool.acquire() as conn, conn.transaction():
            await self._requeue(conn)
            return int(await conn.fetchval("SELECT count(*) FROM a2e_embed_queue"))

    async def vector_queue(self) -> int:
        """Entries waiting for a vector (claimed or not)."""
        return int(await self.pool.fetchval("SELECT count(*) FROM a2e_embed_queue"))

    async def claim_vectors(self, limit: int, lease: float) -> list[tuple[Pending, int]]:
        """Claim up to `limit` queued entries, oldest first, for `lease` seconds of the
        database's clock: rows another host claimed (its lease running) or is claiming right
        now (`FOR UPDATE SKIP LOCKED`) are skipped. Each comes with the text to embed and its
        queue sequence number, for `put_vectors`."""
        rows = await self.pool.fetch(
            "WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now),"
            " c AS (SELECT q.entry_id FROM a2e_embed_queue q, t WHERE q.claimed_until <= t.now"
            "       ORDER BY q.entry_id LIMIT $1 FOR UPDATE OF q SKIP LOCKED),"
            " u AS (UPDATE a2e_embed_queue q SET claimed_until = t.now + $2 FROM c, t"
            "       WHERE q.entry_id = c.entry_id RETURNING q.entry_id, q.seq)"
            " SELECT u.entry_id, u.seq, e.namespace, e.tier, e.owner, e.expires_at, e.key,"
            " e.content, e.tags FROM u JOIN a2e_entries e ON e.id = u.entry_id"
            " ORDER BY u.entry_id", limit, lease)
        return [(Pending(r[0], r[2], r[3], r[4], r[5],
                         stored_text(r[7], list(r[8]), r[6])), r[1])
                for r in rows]

    async def put_vectors(
        self, model: str, rows: Sequence[tuple[int, int, Sequence[float]]]
    ) -> list[int]:
        """Store `(entry id, queue sequence, vector)` rows under `model` in one transaction and
        dequeue them. A row whose entry changed since it was claimed (its sequence moved: it
        stays queued) or was deleted is skipped. Returns the ids stored, after the commit;
        none, with the claims released, when a write of the hosts' requests held one of the
        rows for longer than 100 ms (the background write gives way)."""
        if not rows:
            return []
        dims = {len(v) for _i, _s, v in rows}
        if self.vectors_available:
            for dim in dims - self._indexed_dims:
                async with self.pool.acquire() as conn:
                    await ensure_vector_index(conn, dim)
                self._indexed_dims.add(dim)
        import asyncpg

        ids = [int(i) for i, _s, _v in rows]
        seqs = [int(s) for _i, s, _v in rows]
        try:
            got = await self._write_vectors(model, rows, ids, seqs)
        except asyncpg.LockNotAvailableError:
            # a put, forget or collection holds one of these rows: give way to it (it must
            # never wait on this background write) and release the claims to be taken again
            await self.pool.execute(
                "UPDATE a2e_embed_queue q SET claimed_until = 0 FROM unnest($1::bigint[],"
                " $2::bigint[]) AS r(id, seq) WHERE q.entry_id = r.id AND q.seq = r.seq",
                ids, seqs)
            return []
        return [int(r[0]) for r in got]

    async def _write_vectors(
        self, model: str, rows: Sequence[tuple[int, int, Sequence[float]]], ids: list[int],
        seqs: list[int],
    ) -> list[Any]:
        async with self.pool.acquire() as conn, conn.transaction():
            # never wait long on a row lock: a write of the hosts' requests is in the way, and
            # waiting could close a deadlock cycle that PostgreSQL would break by aborting it
            await conn.execute(f"SET LOCAL lock_timeout = {_VECTOR_LOCK_TIMEOUT_MS}")
            # the entries first (a delete locks its entry before cascading to the queue)
            await conn.execute("SELECT 1 FROM a2e_entries WHERE id = ANY($1::bigint[])"
                               " ORDER BY id FOR KEY SHARE", ids)
            return await conn.fetch(  # type: ignore[no-any-return]
                "WITH r AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[])"
                "           AS r(id, seq, vec)),"
                " d AS (DELETE FROM a2e_embed_queue q USING r"
                "       WHERE q.entry_id = r.id AND q.seq = r.seq RETURNING q.entry_id)"
                " INSERT INTO a2e_vectors (entry_id, model, dim, embedding)"
                " SELECT r.id, $4, cardinality(r.vec::real[]), r.vec::real[] FROM r"
                " JOIN d ON d.entry_id = r.id"
                " ON CONFLICT (entry_id) DO UPDATE SET model = excluded.model,"
                " dim = excluded.dim, embedding = excluded.embedding RETURNING entry_id",
                ids, seqs,
                ["{" + ",".join(map(repr, map(float, v))) + "}" for _i, _s, v in rows], model)

    async def nearest_vectors(
        self, scope: Scope, q: Query, model: str, vector: Sequence[float], now: float, k: int,
        sample: int = 2000, also: Sequence[int] = (),
    ) -> Hits:
        """The `k` entries `q` lets `scope` read nearest to `vector` (cosine) among those
        embedded by `model`, best first (HNSW with pgvector's iterative scan, so the
        visibility filters, applied in the WHERE, do not starve the result), and the mean and
        deviation of the similarity over at most `sample` of the readable embedded entries
        (all of them in a namespace that small); and the similarity of each of `also` (ids the
        caller may read: the keyword candidates) in the same statement. Needs
        `vectors_available`."""
        if not self.vectors_available:
            raise RuntimeError("vector search needs the pgvector extension")
        dim = len(vector)
        p = _Params()
        where = _where(scope, q, now, p)
        qv = f"{p([float(x) for x in vector])}::real[]::vector({dim})"
        dist = f"v.embedding::vector({dim}) <=> {qv}"
        base = (f" FROM a2e_vectors v JOIN a2e_entries e ON e.id = v.entry_id"
                f" WHERE v.dim = {dim} AND v.model = {p(model)} AND {where}")
        # one statement, one round trip: the sample's statistics on every row (and alone on
        # one row when nothing is near); the pool's connections scan HNSW iteratively
        # (`hnsw.iterative_scan`, set when they connect)
        # ... and the similarity of the `also` ids, rows of kind 1 after the nearest (kind 0)
        asked = (f" UNION ALL SELECT 1, v.entry_id, 1 - ({dist}), NULL, NULL, NULL"
                 f" FROM a2e_vectors v WHERE v.entry_id = ANY({p([int(i) for i in also])}"
                 f"::bigint[]) AND v.dim = {dim} AND v.model = {p(model)}") if also else ""
        rows = await self.pool.fetch(
            f"WITH near AS (SELECT v.entry_id, 1 - ({dist}) AS s{base}"
            f" ORDER BY {dist} LIMIT {int(k)}),"
            f" st AS (SELECT count(*) AS n, coalesce(avg(x.s), 0) AS mean,"
            f" coalesce(stddev_pop(x.s), 0) AS std"
            f" FROM (SELECT 1 - ({dist}) AS s{base} LIMIT {int(sample)}) x)"
            f" SELECT * FROM (SELECT 0 AS kind, near.entry_id, near.s, st.n, st.mean, st.std"
            f" FROM st LEFT JOIN near ON true{asked}) r"
            f" ORDER BY r.kind, r.s DESC NULLS LAST", *p.values)
        head = rows[0]
        hits = [r for r in rows if r[0] == 0 and r[1] is not None]
        return Hits(
            ids=np.array([r[1] for r in hits], dtype=np.int64),
            similarities=np.array([r[2] for r in hits], dtype=np.float32),
            mean=float(head[4]), std=float(head[5]), allowed=int(head[3]),
            also={int(r[1]): float(r[2]) for r in rows if r[0] == 1})

    async def vector_similarity(
        self, model: str, vector: Sequence[float], ids: Sequence[int]
    ) -> np.ndarray:
        """Cosine similarity of `vector` to each of `ids` (same order), NaN for an entry
        without a vector of `model`."""
        out = np.full(len(ids), np.nan, dtype=np.float64)
        if not len(ids):
            return out
        q = np.asarray(vector, dtype=np.float64).reshape(-1)
        rows = await self.pool.fetch(
            "SELECT entry_id, embedding FROM a2e_vectors WHERE entry_id = ANY($1::bigint[])"
            " AND model = $2 AND dim = $3", [int(i) for i in ids], model, len(q))
        pos = {int(i): j for j, i in enumerate(ids)}
        for r in rows:
            v = np.asarray(r[1], dtype=np.float64)
            norm = float(np.linalg.norm(v)) or 1.0
            out[pos[int(r[0])]] = float(v @ q) / norm
        return out

    async def fetch(
        self, scope: Scope, q: Query, ids: Sequence[int], now: float
    ) -> list[StoredEntry]:
        """The entries among row `ids` that `q` lets `scope` read (visibility checked again),
        with `id` set; any order."""
        if not len(ids):
            return []
        p = _Params()
        where = _where(scope, q, now, p)
        rows = await self.pool.fetch(
            f"SELECT {_COLUMNS}, e.id FROM a2e_entries e"
            f" WHERE e.id = ANY({p([int(i) for i in ids])}::bigint[]) AND {where}", *p.values)
        return [_row(r, r[10]) for r in rows]

    async def neighbours(
        self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]], span: int,
        now: float,
    ) -> list[tuple[StoredEntry, int, int]]:
        """For each `(id, tier, owner)` of `hits`, the up to `span` entries `q` lets `scope`
        read right before and after it in its own (namespace, tier, owner) by row id: `(entry,
        hit id, distance)`. One round trip; each side is a walk of `a2e_entries_newest` from
        the hit (other groups' rows are never read)."""
        if span <= 0 or not hits:
            return []
        p = _Params()
        ids = p([int(h[0]) for h in hits])
        tiers = p([h[1] for h in hits])
        owners = p([h[2] for h in hits])
        where = _where(scope, q, now, p)
        limit = p(int(span))
        ns = p(scope.namespace)

        def side(after: str, order: str) -> str:
            return (f"SELECT {_COLUMNS}, e.id FROM a2e_entries e WHERE e.namespace = {ns}"
                    f" AND e.tier = h.tier AND e.owner = h.owner AND {after} AND {where}"
                    f" ORDER BY {order} LIMIT {limit}")

        rows = await self.pool.fetch(
            f"SELECT n.*, h.hit FROM unnest({ids}::bigint[], {tiers}::text[], {owners}::text[])"
            " AS h(hit, tier, owner) CROSS JOIN LATERAL ("
            " SELECT x.*, row_number() OVER (ORDER BY x.id DESC) AS d FROM ("
            f"{side('-e.id > -h.hit', '-e.id')}) x UNION ALL"
            " SELECT y.*, row_number() OVER (ORDER BY y.id) AS d FROM ("
            f"{side('-e.id < -h.hit', '-e.id DESC')}) y) n", *p.values)
        return [(_row(r, r[10]), int(r[12]), int(r[11])) for r in rows]
