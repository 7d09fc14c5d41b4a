"""The hosts' vectors on PostgreSQL (`host.store.interface.VectorSearch`): the embedding queue
(`a2e_embed_queue`, claimed with `FOR UPDATE SKIP LOCKED` and a lease), the vectors
(`a2e_vectors`), nearest neighbours on pgvector's HNSW index per dimension."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from host.store.postgres.schema import LOCK_MIGRATE, advisory_lock, ensure_vector_index
from host.store.postgres.sql import VECTOR_LOCK_TIMEOUT_MS, Params, StoreState, read_where
from host.store.records import Hits, Pending, Query, Scope
from host.text.searchable import stored_text

__all__ = ["Vectors"]

# the entries (`e`) the host embeds: all but those stored with client vectors (as SQLite's
# `_EMBEDDED`; the vectors count while the entry holds the content they came with, as a read
# of them, `host.store.postgres.extensions.read_vectors`)
_HOST_EMBEDS = (
    "NOT EXISTS (SELECT 1 FROM a2e_client_vectors c WHERE c.namespace = e.namespace"
    " AND c.tier = e.tier AND c.owner = e.owner AND c.key_hash = a2e_key_hash(e.key)"
    " AND c.digest = sha256(convert_to(e.content, 'UTF8')))")


class Vectors(StoreState):
    """The embedding workers' queue and the vector search, on the store's pool."""

    _index_kind: str | None = None  # halfvec or vector, asked of the server on first use

    async def index_kind(self) -> str:
        """The type the HNSW indexes are on: `halfvec` (pgvector 0.7 and later), else
        `vector` (`host.store.postgres.schema.ensure_vector_index`)."""
        if self._index_kind is None:
            half = await self.pool.fetchval("SELECT to_regtype('halfvec') IS NOT NULL")
            self._index_kind = "halfvec" if half else "vector"
        return self._index_kind

    async def set_vector_model(self, name: str, dim: int) -> bool:
        """Record the embedder in `a2e_search_meta` (under the migration lock, so hosts
        starting together agree). A different model than recorded deletes every vector and
        queues every entry for re-embedding (but those with client vectors); True when that
        happened."""
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
            f"INSERT INTO a2e_embed_queue AS q (entry_id, namespace) SELECT id, namespace"
            f" FROM a2e_entries e"
            f" WHERE {_HOST_EMBEDS}"
            f" ON CONFLICT (entry_id) DO UPDATE SET seq = q.seq + 1, claimed_until = 0")

    async def requeue_vectors(self) -> int:
        """Queue every entry (but those with client vectors, which the host does not embed)
        for re-embedding, releasing every claim; the queue's length."""
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

    async def claim_namespace_vectors(
        self, namespace: str, limit: int, lease: float, skip: Sequence[int] = (),
    ) -> tuple[list[tuple[Pending, int]], int]:
        """As `claim_vectors`, of the entries of `namespace` alone (oldest first, leased,
        those another host holds or is claiming skipped), and how many of the namespace's
        queued entries this claim left: held by other hosts, past `limit`, or changed while
        it ran (the ids `skip` not counted: the caller's own claims it keeps). 0 means every
        entry the namespace had queued when the statement began is now claimed by this call
        (or in `skip`).

        One statement, one snapshot for the claim and the count, both on the queue's index of
        (namespace, entry id) (migration 24): another namespace's backlog is not read."""
        rows = await self.pool.fetch(
            "WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now),"
            " c AS (SELECT q.entry_id FROM a2e_embed_queue q, t WHERE q.namespace = $3"
            "       AND q.claimed_until <= t.now"
            "       ORDER BY q.entry_id LIMIT $1 FOR UPDATE OF q SKIP LOCKED),"
            " u AS (UPDATE a2e_embed_queue q SET claimed_until = t.now + $2 FROM c, t"
            "       WHERE q.entry_id = c.entry_id RETURNING q.entry_id, q.seq)"
            " SELECT u.entry_id, u.seq, e.namespace, e.tier, e.owner, e.expires_at, e.key,"
            " e.content, e.tags, NULL::bigint FROM u JOIN a2e_entries e ON e.id = u.entry_id"
            " UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
            " (SELECT count(*) FROM a2e_embed_queue q WHERE q.namespace = $3"
            "  AND q.entry_id <> ALL($4::bigint[]))"
            " ORDER BY 1 NULLS LAST", limit, lease, namespace, [int(i) for i in skip])
        claimed = [(Pending(r[0], r[2], r[3], r[4], r[5],
                            stored_text(r[7], list(r[8]), r[6])), r[1])
                   for r in rows if r[0] is not None]
        kept = set(skip)
        return claimed, max(0, int(rows[-1][9]) - sum(p.id not in kept for p, _s in claimed))

    async def release_vectors(self, rows: Sequence[tuple[int, int]]) -> None:
        """Release the claims of `(entry id, queue sequence)` rows: claimable again at once (a
        row whose entry changed since, its sequence moved, was released by the change)."""
        if rows:
            await self.pool.execute(
                "UPDATE a2e_embed_queue q SET claimed_until = 0 FROM unnest($1::bigint[],"
                " $2::bigint[]) AS r(id, seq) WHERE q.entry_id = r.id AND q.seq = r.seq",
                [int(i) for i, _s in rows], [int(s) for _i, s in rows])

    async def put_vectors(
        self, model: str, rows: Sequence[tuple[int, int, np.ndarray]]
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
                kind = await self.index_kind()
                async with self.pool.acquire() as conn:
                    await ensure_vector_index(conn, dim, kind)
                self._indexed_dims.add(dim)
        import asyncpg

        ids = [int(i) for i, _s, _v in rows]
        seqs = [int(s) for _i, s, _v in rows]
        try:
            got = await self._write_vectors(model, rows, ids, seqs)
        except asyncpg.LockNotAvailableError:
            # a put, forget or collection holds one of these rows: give way to it (it must
            # never wait on this background write) and release the claims to be taken again
            await self.release_vectors(list(zip(ids, seqs, strict=True)))
            return []
        return [int(r[0]) for r in got]

    async def _write_vectors(
        self, model: str, rows: Sequence[tuple[int, int, np.ndarray]], ids: list[int],
        seqs: list[int],
    ) -> list[Any]:
        # the vectors go as one float4 array in binary, each row its slice [lo:hi] (text
        # would cost the host a repr and the server a parse of every number)
        vecs = [np.asarray(v, dtype=np.float32).ravel() for _i, _s, v in rows]
        hi = np.cumsum([len(v) for v in vecs])
        async with self.pool.acquire() as conn, conn.transaction():
            # never wait long on a row lock: a write of the hosts' requests is in the way, and
            # waiting could close a deadlock cycle that PostgreSQL would break by aborting it
            await conn.execute(f"SET LOCAL lock_timeout = {VECTOR_LOCK_TIMEOUT_MS}")
            # the entries first (a delete locks its entry before cascading to the queue)
            await conn.execute("SELECT 1 FROM a2e_entries WHERE id = ANY($1::bigint[])"
                               " ORDER BY id FOR KEY SHARE", ids)
            return await conn.fetch(  # type: ignore[no-any-return]
                "WITH r AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[],"
                "           $4::int[]) AS r(id, seq, lo, hi)),"
                " d AS (DELETE FROM a2e_embed_queue q USING r"
                "       WHERE q.entry_id = r.id AND q.seq = r.seq RETURNING q.entry_id)"
                " INSERT INTO a2e_vectors (entry_id, model, dim, embedding)"
                " SELECT r.id, $6, r.hi - r.lo + 1, ($5::real[])[r.lo:r.hi] FROM r"
                " JOIN d ON d.entry_id = r.id"
                " ON CONFLICT (entry_id) DO UPDATE SET model = excluded.model,"
                " dim = excluded.dim, embedding = excluded.embedding RETURNING entry_id",
                ids, seqs, [int(h) - len(v) + 1 for h, v in zip(hi, vecs, strict=True)],
                [int(h) for h in hi], np.concatenate(vecs).tolist(), model)

    async def nearest_vectors(
        self, scope: Scope, q: Query, model: str, vector: np.ndarray, now: float, k: int,
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
        sql, values = self.nearest_sql(scope, q, model, vector, now, k, sample, also,
                                       await self.index_kind())
        rows = await self.pool.fetch(sql, *values)
        head = rows[0]
        hits = [r for r in rows if r[0] == 0 and r[1] is not None]
        return Hits(
            ids=np.array([r[1] for r in hits], dtype=np.int64),
            similarities=np.array([r[2] for r in hits], dtype=np.float32),
            mean=float(head[4]), std=float(head[5]), allowed=int(head[3]),
            also={int(r[1]): float(r[2]) for r in rows if r[0] == 1})

    @staticmethod
    def nearest_sql(scope: Scope, q: Query, model: str, vector: np.ndarray, now: float,
                    k: int, sample: int, also: Sequence[int], kind: str
                    ) -> tuple[str, list[Any]]:
        """The statement of `nearest_vectors` and its values. The nearest are ordered by the
        distance on `kind` (`halfvec`: the expression of the HNSW index, so the index serves
        the order); every similarity returned is computed on `vector` (32-bit floats), so the
        16-bit index changes which rows are found at most, never a score."""
        dim = len(vector)
        p = Params()
        where = read_where(scope, q, now, p)
        lit = p([float(x) for x in vector])
        dist = f"v.embedding::vector({dim}) <=> {lit}::real[]::vector({dim})"
        order = f"v.embedding::{kind}({dim}) <=> {lit}::real[]::{kind}({dim})"
        base = (f" FROM a2e_vectors v JOIN a2e_entries e ON e.id = v.entry_id"
                f" WHERE v.dim = {dim} AND v.model = {p(model)} AND {where}")
        # one statement, one round trip: the sample's statistics on every row (and alone on
        # one row when nothing is near); the pool's connections scan HNSW iteratively
        # (`hnsw.iterative_scan`, set when they connect)
        # ... and the similarity of the `also` ids, rows of kind 1 after the nearest (kind 0)
        asked = (f" UNION ALL SELECT 1, v.entry_id, 1 - ({dist}), NULL, NULL, NULL"
                 f" FROM a2e_vectors v WHERE v.entry_id = ANY({p([int(i) for i in also])}"
                 f"::bigint[]) AND v.dim = {dim} AND v.model = {p(model)}") if also else ""
        sql = (f"WITH near AS (SELECT v.entry_id, 1 - ({dist}) AS s{base}"
               f" ORDER BY {order} LIMIT {int(k)}),"
               f" st AS (SELECT count(*) AS n, coalesce(avg(x.s), 0) AS mean,"
               f" coalesce(stddev_pop(x.s), 0) AS std"
               f" FROM (SELECT 1 - ({dist}) AS s{base} LIMIT {int(sample)}) x)"
               f" SELECT * FROM (SELECT 0 AS kind, near.entry_id, near.s, st.n, st.mean, st.std"
               f" FROM st LEFT JOIN near ON true{asked}) r"
               f" ORDER BY r.kind, r.s DESC NULLS LAST")
        return sql, p.values

    async def vector_similarity(
        self, model: str, vector: np.ndarray, ids: Sequence[int]
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

    async def vectors_of(self, ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        """The stored vectors of entry `ids` that have one of `dim` values: (ids, `(n, dim)`
        float32 unit rows), in no particular order (SQLite's `vectors_of`: the judgement of a
        reply compares its entries with one another, `host.search.judgement`)."""
        if not len(ids):
            return [], np.zeros((0, dim), dtype=np.float32)
        rows = await self.pool.fetch(
            "SELECT entry_id, embedding FROM a2e_vectors WHERE entry_id = ANY($1::bigint[])"
            " AND dim = $2", [int(i) for i in ids], dim)
        if not rows:
            return [], np.zeros((0, dim), dtype=np.float32)
        vecs = np.asarray([r[1] for r in rows], dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return [int(r[0]) for r in rows], vecs

