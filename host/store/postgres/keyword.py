"""The PostgreSQL store's keyword search: one `a2e_keyword_query` statement a query (term counts,
the pool, BM25, visibility and rows, with the neighbours of its best candidates and, asked, the
query's statistics; functions/keyword.sql), and a text's analysis as the index holds it."""

from __future__ import annotations

from host.store import filters
from host.store.postgres.sql import (
    StoreState,
    entry_of,
    indexable,
    json_decode,
    lexeme_counts,
    scope_lexeme,
    visibility,
)
from host.store.records import Query, Scope, StoredEntry
from host.text.bm25 import Analysis, Bm25Stats
from host.text.keyword import coverage, query_terms

__all__ = ["Keyword"]

_VALID = 16  # the columns of an entry's validity in a row of `a2e_keyword_query`


class Keyword(StoreState):
    """`EntryStore`'s keyword search (with its statistics: `search_stats`) and `analyse`."""

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, *,
        relevance: bool = True,
    ) -> list[StoredEntry]:
        """Keyword candidates for `text`, best BM25 first (FTS5's formula over the namespace's
        statistics), each with `keyword` (BM25), `id` and `relevance`
        (`host.search.keyword.coverage` of the terms searched, as on SQLite); at most
        `candidates`, equal scores newest first (as on SQLite). Terms in more than
        `max_term_docs` entries the reader may read are left out (0: none; a single term is
        always searched) and a term's statistic counts at most `max_term_docs` + 1 entries (as
        on SQLite); only the newest `max_matches` matches the reader may read are scored (0:
        all). One statement (`a2e_keyword_query`): term counts, candidates, visibility and
        rows; `relevance` comes with them whatever the caller asks (`EntryStore.search`)."""
        return (await self.search_near(scope, q, text, now, candidates, 0, 0))[0]

    async def search_stats(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, *,
        relevance: bool = True,
    ) -> tuple[list[StoredEntry], Bm25Stats]:
        """`search`, and in the same statement the BM25 statistics of the terms it searched
        (`EntryStore.search_stats`)."""
        found, _, stats = await self.search_near(scope, q, text, now, candidates, 0, 0,
                                                 stats=True)
        assert stats is not None
        return found, stats

    async def search_near(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, near: int,
        span: int, *, stats: bool = False,
    ) -> tuple[list[StoredEntry], dict[int, list[tuple[StoredEntry, int]]], Bm25Stats | None]:
        """`search`, and in the same statement the `neighbours` (`span` a side) of its first
        `near` candidates: {candidate id: [(neighbour, distance), ...]} for each of them (an
        empty list: none), in the order `neighbours` gives them. With the extensions' filters
        (`where`, key prefixes: applied here, after the statement) nothing is prefetched. With
        `stats`, also the BM25 statistics of the terms searched (the statement's first row;
        with no tier in `q`, its only one), else None."""
        terms = indexable(query_terms(text))
        if not terms or not q.tiers and not stats:
            return [], {}, (Bm25Stats((), (), 1, 1.0) if stats else None)
        filtered = bool(q.where or q.key_prefix)
        if filtered or span <= 0:
            near = 0
        tiers, owners, keys, tags = visibility(scope, q)
        rows = await self.pool.fetch(
            "SELECT * FROM a2e_keyword_query($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
            " $13, $14, $15)", scope.namespace, scope_lexeme(scope.namespace), terms,
            self.max_term_docs, self.max_matches or None, candidates, tiers, owners, now, keys,
            tags, near, max(span, 0), q.as_of, stats)
        out = []
        by_id: dict[int, StoredEntry] = {}
        near_of: dict[int, list[tuple[StoredEntry, int]]] = {}
        searched: tuple[str, ...] = ()
        shares: dict[tuple[str, ...], float] = {}
        neighbours = []
        found_stats: Bm25Stats | None = None
        for r in rows:
            if r[10] is None:  # the statistics' row (`stats`), first
                n = int(r[19])
                found_stats = Bm25Stats(tuple(r[13] or ()), tuple(int(h) for h in r[18] or ()),
                                        n, int(r[20]) / n)
                continue
            if r[14] is not None:  # a neighbour of the candidate r[14]
                neighbours.append(r)
                continue
            entry = entry_of(r, r[10], r[11], _VALID)
            by_id[r[10]] = entry
            if len(near_of) < near:
                near_of[r[10]] = []
            if r[13] is not None:  # the terms searched, on the first row
                searched = tuple(r[13])
            if filtered and not filters.matches(
                    json_decode(entry.content), json_decode(entry.key), q.where, q.key_prefix):
                continue  # a2e_keyword_query applies keys and tags; the extensions' here
            held = tuple(r[12])
            share = shares.get(held)
            if share is None:  # rows holding the same terms share their coverage
                share = shares[held] = coverage(searched, " ".join(held))
            entry.relevance = share
            out.append(entry)
        for r in neighbours:  # a row among the candidates comes without key and content
            near_of[r[14]].append((by_id[r[10]] if r[3] is None else entry_of(r, r[10], None, _VALID),
                                  int(r[15])))
        return out, near_of, found_stats

    def analyse(self, text: str) -> Analysis:
        """`text` as the keyword index holds it (its distinct tokens with counts, capped at 256
        as `lexemes_of` stores them; length plus the scope lexeme)."""
        terms = lexeme_counts(text)
        return Analysis(terms, sum(terms.values()) + 1)
