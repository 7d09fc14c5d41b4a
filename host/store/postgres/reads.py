"""The PostgreSQL store's reads: finds, keyword search (one `a2e_keyword_query` statement,
with the neighbours of its best candidates) and its statistics, fetches by id, neighbours,
key paths, client vectors' reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from host.store import filters
from host.store.key_index import leading
from host.store.postgres import extensions as pg_ext
from host.store.postgres import filters as pg_filters
from host.store.postgres.scan_index import prefix_range
from host.store.postgres.sql import (
    _COLUMNS,
    StoreState,
    _decode,
    _indexable,
    _lexeme_counts,
    _Params,
    _row,
    _scope_lexeme,
    _visibility,
    _where,
)
from host.store.records import Query, Scope, StoredEntry
from host.text.bm25 import Analysis, Bm25Stats
from host.text.keyword import coverage, query_terms

__all__ = ["Reads"]


class Reads(StoreState):
    """`EntryStore`'s reads, the keyword search's, the store extensions' (`key_paths`,
    `client_vectors`)."""

    async def find(self, scope: Scope, q: Query, now: float) -> tuple[list[StoredEntry], int]:
        """Entries matching `q`, best stored score first, then newest; (page, total)."""
        p = _Params()
        where = _where(scope, q, now, p) + prefix_range(q.key_prefix, p)  # (an index range)
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
        `candidates`, equal scores newest first (as on SQLite). Terms in more than
        `max_term_docs` entries the reader may read are left out (0: none; a single term is
        always searched) and a term's statistic counts at most `max_term_docs` + 1 entries (as
        on SQLite); only the newest `max_matches` matches the reader may read are scored (0:
        all). One statement (`a2e_keyword_query`): term counts, candidates, visibility and
        rows."""
        return (await self.search_near(scope, q, text, now, candidates, 0, 0))[0]

    async def search_near(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, near: int,
        span: int,
    ) -> tuple[list[StoredEntry], dict[int, list[tuple[StoredEntry, int]]]]:
        """`search`, and in the same statement the `neighbours` (`span` a side) of its first
        `near` candidates: {candidate id: [(neighbour, distance), ...]} for each of them (an
        empty list: none), in the order `neighbours` gives them. With the extensions' filters
        (`where`, key prefixes: applied here, after the statement) nothing is prefetched."""
        terms = _indexable(query_terms(text))
        if not terms or not q.tiers:
            return [], {}
        filtered = bool(q.where or q.key_prefix)
        if filtered or span <= 0:
            near = 0
        tiers, owners, keys, tags = _visibility(scope, q)
        rows = await self.pool.fetch(
            "SELECT * FROM a2e_keyword_query($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
            " $13)", scope.namespace, _scope_lexeme(scope.namespace), terms, self.max_term_docs,
            self.max_matches or None, candidates, tiers, owners, now, keys, tags, near,
            max(span, 0))
        out = []
        by_id: dict[int, StoredEntry] = {}
        near_of: dict[int, list[tuple[StoredEntry, int]]] = {}
        searched: tuple[str, ...] = ()
        shares: dict[tuple[str, ...], float] = {}
        neighbours = []
        for r in rows:
            if r[14] is not None:  # a neighbour of the candidate r[14]
                neighbours.append(r)
                continue
            entry = _row(r, r[10], r[11])
            by_id[r[10]] = entry
            if len(near_of) < near:
                near_of[r[10]] = []
            if r[13] is not None:  # the terms searched, on the first row
                searched = tuple(r[13])
            if filtered and not filters.matches(
                    _decode(entry.content), _decode(entry.key), q.where, q.key_prefix):
                continue  # a2e_keyword_query applies keys and tags; the extensions' here
            held = tuple(r[12])
            share = shares.get(held)
            if share is None:  # rows holding the same terms share their coverage
                share = shares[held] = coverage(searched, " ".join(held))
            entry.relevance = share
            out.append(entry)
        for r in neighbours:  # a row among the candidates comes without key and content
            near_of[r[14]].append((by_id[r[10]] if r[3] is None else _row(r, r[10]), int(r[15])))
        return out, near_of

    async def key_paths(self, scope: Scope, q: Query, field: str, prefix: Sequence[str],
                        now: float) -> list[bytes]:
        """The distinct JSON arrays under key member `field` that `q` lets `scope` read, with
        `prefix`'s elements ("*": any) leading."""
        if any("\x00" in el for el in prefix):
            return []  # no key read here holds U+0000 (postgres/filters.py)
        p = _Params()
        where = _where(scope, q, now, p) + prefix_range([leading(field, prefix)], p)
        member = f"({pg_filters.KEY} -> {p(field)}::text)"
        extra = "".join(f" AND ({member} -> {i}) = to_jsonb({p(el)}::text)"
                        for i, el in enumerate(prefix) if el != "*")
        rows = await self.pool.fetch(
            f"SELECT DISTINCT {member}::text FROM a2e_entries e WHERE {where}"
            f" AND jsonb_typeof({member}) = 'array'{extra}", *p.values)
        return [r[0].encode() for r in rows]

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
            scope.namespace, _scope_lexeme(scope.namespace), usable, self.max_term_docs, vis[0],
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

    async def client_vectors(self, scope: Scope, q: Query, space: str, now: float
                             ) -> tuple[int, list[tuple[int, np.ndarray]]]:
        """The dimension of `space` (0: none) and the readable entries' vectors in it."""
        p = _Params()
        where = _where(scope, q, now, p)
        return await pg_ext.read_vectors(self.pool, scope.namespace, space, where, p, p.values)

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
