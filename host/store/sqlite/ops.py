"""The SQL of the entry store on SQLite: plain functions over one `sqlite3.Connection`.

The async `SQLiteEntryStore` runs the writes in its writer thread and the reads on the event
loop; the library's synchronous `SQLiteStore` and the CLI call the same functions, so there is
one engine. Write functions expect to run inside a transaction the caller opened, and record
what they changed in the change log (`host.store.sqlite.changes`) in that same transaction.
"""

from __future__ import annotations

import functools
import heapq
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import msgspec

from host.store.changes import removed_record, stored_record
from host.store.growth import PutOutcomes
from host.store.records import (
    NewEntry,
    Query,
    Quotas,
    Refusal,
    Scope,
    StoredEntry,
    StoreOutcome,
    owner_for,
    scope_token,
    stored_bytes,
)
from host.store.sqlite import bm25, filters, scan_index
from host.store.sqlite.changes import log_change
from host.store.sqlite.client_vectors import space_fits, write_client_vectors
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.evict import make_room
from host.text.bm25 import Bm25Stats
from host.text.keyword import coverage, fts_match_expression
from host.text.searchable import stored_text

__all__ = [
    "GC_BATCH",
    "INDEX_BUDGET",
    "Quotas",
    "collect_expired",
    "find_entries",
    "forget_entries",
    "keyword_stats",
    "namespace_entries",
    "put_entries",
    "scope_token",
    "search_entries",
    "selective_terms",
    "touch_entries",
]

_decode = msgspec.json.decode
_encode_tags = msgspec.json.Encoder().encode
_tags_decoder = msgspec.json.Decoder(list[str])
_ids_encoder = msgspec.json.Encoder()


def _encode_ids(ids: list[int]) -> str:
    """`ids` as a JSON array, for `json_each(?)` (text: a BLOB would be read as JSONB)."""
    return _ids_encoder.encode(ids).decode()


INDEX_BUDGET = 16000  # index rows `_scored_by_index` reads at most (see `search_entries`)
GC_BATCH = 1000  # expired entries `collect_expired` deletes at most a call (one transaction)

_COLUMNS = "e.tier, e.owner, e.key, e.content, e.tags, e.source, e.score, e.ttl, e.created_at, e.updated_at"


@dataclass(slots=True)
class _Usage:
    """Entries and bytes of one namespace and of one agent in it, kept up to date in a put."""

    ns_entries: int
    ns_bytes: int
    agent_entries: int
    agent_bytes: int

    def over(self, q: Quotas, ns: tuple[int, int], agent: tuple[int, int]) -> bool:
        """True when growing by (entries, bytes) in the namespace and for the agent would pass
        a quota (shrinking never does)."""
        return (
            (ns[0] > 0 and self.ns_entries + ns[0] > q.max_entries_per_namespace)
            or (agent[0] > 0 and self.agent_entries + agent[0] > q.max_entries_per_agent)
            or (ns[1] > 0 and self.ns_bytes + ns[1] > q.max_bytes_per_namespace)
            or (agent[1] > 0 and self.agent_bytes + agent[1] > q.max_bytes_per_agent)
        )

    def add(self, ns: tuple[int, int], agent: tuple[int, int]) -> None:
        """Count (entries, bytes) more in the namespace and for the agent."""
        self.ns_entries += ns[0]
        self.ns_bytes += ns[1]
        self.agent_entries += agent[0]
        self.agent_bytes += agent[1]


def _row(r: tuple, id: int | None = None) -> StoredEntry:
    """The entry of a row of `_COLUMNS`, with the row id `id` when given."""
    return StoredEntry(
        tier=r[0],
        owner=r[1],
        key=r[2].encode(),
        content=r[3].encode(),
        tags=_tags_decoder.decode(r[4]),
        source=r[5],
        score=r[6],
        ttl=r[7],
        created_at=r[8],
        updated_at=r[9],
        id=id,
    )


@functools.lru_cache(maxsize=512)
def _where_sql(tiers: int, keys: int, tags: int) -> str:
    """The WHERE text for `tiers` visibility ranges, `keys` keys and `tags` distinct tags (the
    same few shapes come back on every request, so the text is built once a shape)."""
    vis = " OR ".join(["(e.tier = ? AND e.owner = ?)"] * tiers) or "0"
    # with tags (and no keys) the tag postings drive the read: the unary + keeps SQLite from
    # walking the whole visible range of the rank index instead
    ns = "+e.namespace" if tags and not keys else "e.namespace"
    sql = f"{ns} = ? AND ({vis}) AND (e.expires_at IS NULL OR e.expires_at > ?)"
    if keys:
        sql += f" AND e.key IN ({','.join('?' * keys)})"
    if tags:
        # the tag postings of exactly the (namespace, tier, owner) ranges the reader may see:
        # one index range a tier (an OR of the tiers would scan the namespace's postings)
        marks = ",".join("?" * tags)
        per_tier = " UNION ALL ".join(
            ["SELECT t.entry_id FROM entry_tags t WHERE t.namespace = ? AND t.tier = ?"
             f" AND t.owner = ? AND t.tag IN ({marks})"] * tiers
        ) or "SELECT NULL WHERE 0"
        if tags == 1:
            sql += f" AND e.id IN ({per_tier})"
        else:
            sql += (f" AND e.id IN (SELECT entry_id FROM ({per_tier})"
                    " GROUP BY entry_id HAVING count(*) = ?)")
    return sql


def _where(scope: Scope, q: Query, now: float) -> tuple[str, list[object]]:
    """The WHERE clause of a read: namespace, visibility, liveness, keys, tags, min score."""
    ns = scope.namespace
    owners: list[object] = []
    for tier in q.tiers:
        owners += (tier, owner_for(tier, scope.agent))
    params: list[object] = [ns, *owners, now]
    if q.keys:
        params += [k.decode() for k in q.keys]
    tags = list(dict.fromkeys(q.tags)) if q.tags else []
    if tags:
        for i in range(0, len(owners), 2):
            params += [ns, owners[i], owners[i + 1], *tags]
        if len(tags) > 1:
            params.append(len(tags))
    sql = _where_sql(len(q.tiers), len(q.keys), len(tags))
    if q.where or q.key_prefix:  # the store extensions' filters (host/store/sqlite/filters.py)
        more, more_params = filters.where_sql(q.where, q.key_prefix)
        # and the index range of a key prefix, where it has one (host/store/sqlite/scan_index.py)
        span, span_params = scan_index.prefix_range(q.key_prefix)
        return sql + more + span, params + more_params + span_params
    return sql, params


def _stored_where(scope: Scope, q: Query, now: float) -> tuple[str, list[object]]:
    """`_where` plus `q.min_score` on the stored score (the filter of a no-query read)."""
    where, params = _where(scope, q, now)
    if q.min_score > 0:
        where += " AND e.score >= ?"
        params.append(q.min_score)
    return where, params


def namespace_entries(conn: sqlite3.Connection, namespace: str) -> int:
    """The entries `namespace` holds, expired ones not yet collected included (its `usage`
    row: one point read)."""
    row = conn.execute("SELECT entries FROM usage WHERE namespace = ? AND agent = ''",
                       (namespace,)).fetchone()
    return int(row[0]) if row is not None else 0


def find_entries(
    conn: sqlite3.Connection, scope: Scope, q: Query, now: float
) -> tuple[list[StoredEntry], int]:
    """Entries matching `q` by score desc, updated_at desc: (the first `q.limit`, total).

    Each filter reads through the index that fits it (see EXPLAIN QUERY PLAN): keys through
    the unique key index (the few rows are sorted here), tags through the tag postings of each
    visible range (counted, then paged with a top-`limit` sort). Without either, `total` is counted
    on the rank index alone (it holds score and expires_at) and the page is read per tier in
    the rank index's order, so only `limit` rows a tier are read whole.
    """
    if q.keys or q.tags:
        where, params = _stored_where(scope, q, now)
        if q.keys:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM entries e WHERE {where}",
                                params).fetchall()
            rows.sort(key=lambda r: (-r[6], -r[9]))
            return [_row(r) for r in rows[q.offset: q.offset + q.limit]], len(rows)
        # a count, then a top-`limit` page (a window count would sort every match whole)
        total = conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", params).fetchone()[0]
        if not total:
            return [], 0
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM entries e WHERE {where}"
            " ORDER BY e.score DESC, e.updated_at DESC LIMIT ? OFFSET ?",
            [*params, q.limit, q.offset],
        ).fetchall()
        return [_row(r) for r in rows], total
    counts, pages, params, page_params = [], [], [], []
    for tier in q.tiers:
        where, p = _stored_where(scope, replace(q, tiers=(tier,)), now)
        counts.append(f"(SELECT count(*) FROM entries e WHERE {where})")
        params += p
        pages.append(f"SELECT * FROM (SELECT {_COLUMNS} FROM entries e WHERE {where}"
                     " ORDER BY e.score DESC, e.updated_at DESC LIMIT ?)")
        page_params += [*p, q.limit + q.offset]
    if not pages:
        return [], 0
    total = conn.execute(f"SELECT {' + '.join(counts)}", params).fetchone()[0]
    if not total or q.offset >= total:
        return [], total
    sql = " UNION ALL ".join(pages)
    if len(pages) > 1 or q.offset:
        sql = f"SELECT * FROM ({sql}) ORDER BY 7 DESC, 10 DESC LIMIT ? OFFSET ?"
        page_params += [q.limit, q.offset]
    return [_row(r) for r in conn.execute(sql, page_params).fetchall()], total


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction around the body (unless the caller is in one): a search's
    statements see one snapshot. In autocommit each statement has its own, and a search
    decides its `_Layout` (which namespaces exist) in one statement and counts a term's rows
    in the next: a namespace committed between them by another connection had its rows
    counted as the reader's (another namespace moving the scores; more holders than rows
    failed the query)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def search_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    q: Query,
    terms: tuple[str, ...],
    now: float,
    candidates: int,
    max_term_docs: int = 0,
    max_matches: int = 0,
    index_budget: int = INDEX_BUDGET,
) -> list[StoredEntry]:
    """Keyword candidates sharing a term with `terms`, best BM25 first, `relevance` set
    (the share of terms present), and `id` and `keyword` (BM25, higher is better).

    Only entries `q` lets `scope` read take part, before any cap: the counts of `max_term_docs`,
    the `max_matches` cap and the `candidates` cut all apply to readable entries. BM25 uses the
    namespace's own statistics (`host.store.sqlite.bm25`), never the table's: what another
    namespace stores moves neither results nor scores.

    With `max_term_docs` > 0, terms found in more readable entries than that are left out (see
    `selective_terms`). With `max_matches` > 0, only the newest `max_matches` readable entries
    that match are scored: a query whose terms are all common matched ~37,000 of 100,000
    entries (150-250 ms under load; ~20 ms with 4,000 scored).

    When the kept terms are in at most `index_budget` rows of the whole index and the search
    matches without the scope token (`_Layout`), the rows are scored from the index alone
    (`_scored_by_index`: the same rows, scores and order, without reading the entries and
    texts of those that do not make the top `candidates`); 0: never. At a million rows the
    index's way costs less up to ~16,000 matches (a word of ~6,000 rows: ~17 ms instead of
    ~27; of ~22,000 rows: ~26 instead of ~22, the newest 4,000 being close together).
    All of it reads one snapshot (`_snapshot`)."""
    with _snapshot(conn):
        return _search_entries(conn, scope, q, terms, now, candidates, max_term_docs,
                               max_matches, index_budget)


def _search_entries(
    conn: sqlite3.Connection, scope: Scope, q: Query, terms: tuple[str, ...], now: float,
    candidates: int, max_term_docs: int, max_matches: int, index_budget: int,
) -> list[StoredEntry]:
    layout = _layout(conn, scope_token(scope.namespace)) if terms else _Layout(True)
    kept, stats = keyword_stats(conn, scope, q, terms, now, max_term_docs, layout)
    if not kept:
        return []
    where, params = _where(scope, q, now)
    if not layout.scoped and index_budget > 0:
        found = _scored_by_index(conn, kept, stats, where, params, candidates, max_matches,
                                 index_budget)
        if found is not None:
            return found
    match = _match(scope, kept, layout.scoped)
    # FTS-driven (CROSS JOIN keeps SQLite from walking the namespace's rows and probing the
    # index with each: ~4,000 times slower), newest match first, visibility joined before LIMIT
    sql = (f"SELECT f.rowid, highlight(entries_fts, 1, '{bm25.MARK_OPEN}', '{bm25.MARK_CLOSE}'),"
           " (SELECT sz FROM entries_fts_docsize WHERE id = f.rowid)"
           f" FROM entries_fts f CROSS JOIN entries e ON e.id = f.rowid"
           f" WHERE entries_fts MATCH ? AND {where} ORDER BY f.rowid DESC")
    args: list[object] = [match, *params]
    if max_matches > 0:
        sql += " LIMIT ?"
        args.append(max_matches)
    best = heapq.nlargest(candidates, bm25.scored_rows(stats, conn.execute(sql, args)))
    if not best:
        return []
    rows = {r[10]: r for r in conn.execute(
        f"SELECT {_COLUMNS}, e.id FROM entries e WHERE e.id IN ({','.join('?' * len(best))})",
        [rowid for _, rowid, _ in best])}
    out = []
    for s, rowid, hl in best:
        r = rows.get(rowid)
        if r is None:
            continue
        entry = _row(r, rowid)
        body = hl.replace(bm25.MARK_OPEN, "").replace(bm25.MARK_CLOSE, "")
        entry.relevance, entry.keyword = coverage(kept, body), s
        out.append(entry)
    return out


_INSTANCES = "temp.a2e_fts_instance"  # entries_fts's terms by row (fts5vocab, per connection)


INSTANCES_A_ROW = 4  # `_scored_by_index` reads at most this many instances a budgeted row


def _instances(conn: sqlite3.Connection, term: str, limit: int) -> list[tuple[int]]:
    """The row of each instance of `term` (index form) in the body of `entries_fts`, in rowid
    order, at most `limit` of them: FTS5's postings read through an `fts5vocab` table of the
    connection's temp schema, created on first use (nothing in the database file)."""
    sql = f"SELECT doc FROM {_INSTANCES} WHERE term = ? AND col = 'body' LIMIT ?"
    try:
        return conn.execute(sql, (term, limit)).fetchall()
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {_INSTANCES}"
                     " USING fts5vocab(main, entries_fts, instance)")
        return conn.execute(sql, (term, limit)).fetchall()


def _scored_by_index(
    conn: sqlite3.Connection, kept: tuple[str, ...], stats: Bm25Stats, where: str,
    params: list[object], candidates: int, max_matches: int, budget: int,
) -> list[StoredEntry] | None:
    """`search_entries`' result, its rows scored from the index alone, or None when the kept
    terms are in more than `budget` rows of the index, or their instances in more than
    `INSTANCES_A_ROW` times that (or one is not a single index term).

    The matches are read from FTS5's postings with their term counts (`_instances`, the
    counts `highlight()` marks). With `max_matches` > 0 and more matches than that in the
    index, the newest `max_matches` the reader may read are kept (visibility read newest
    first, as the highlight path's LIMIT does); otherwise every match is scored and
    visibility read for the best only. A row's length comes from its docsize record, its
    score from the same `bm25.Scorer`. Then the best are read, entry and text, in chunks
    until `candidates` are readable. So a rare term's thousand matches, spread over a million
    rows, cost one docsize read each instead of an entry, a row, its highlight() and a docsize
    read. Same order: BM25 desc, then newest."""
    if any(len(bm25.stems(t)) != 1 for t in kept):
        # a query term of several index terms (a phrase) or of none: highlight() counts it
        # (comparing the counts missed a term split in two beside one read as none)
        return None
    counted = "SELECT count(*) FROM (SELECT 1 FROM entries_fts WHERE entries_fts MATCH ? LIMIT ?)"
    total = 0
    for t in dict.fromkeys(kept):
        total += int(conn.execute(counted, (f'body : "{t}"', budget + 1 - total)).fetchone()[0])
        if total > budget:
            return None
    tf: dict[int, dict[str, int]] = {}
    left = INSTANCES_A_ROW * budget  # a word repeated through every row: the highlight path
    for term in dict.fromkeys(stats.terms):
        docs = _instances(conn, term, left + 1)
        left -= len(docs)
        if left < 0:
            return None
        for (doc,) in docs:
            counts = tf.get(doc)
            if counts is None:
                tf[doc] = {term: 1}
            else:
                counts[term] = counts.get(term, 0) + 1
    if not tf:
        return []
    checked = 0 < max_matches < len(tf)
    if checked:
        # the newest `max_matches` readable: driven by the ids, newest first (CROSS JOIN; a
        # plan by the namespace's index would read its every row), stopped at the LIMIT
        newest = sorted(tf, reverse=True)
        rows = conn.execute(
            "SELECT e.id, d.sz FROM json_each(?) j CROSS JOIN entries e ON e.id = j.value"
            f" CROSS JOIN entries_fts_docsize d ON d.id = e.id WHERE {where} LIMIT ?",
            [_encode_ids(newest), *params, max_matches]).fetchall()
        if any(a[0] <= b[0] for a, b in zip(rows, rows[1:], strict=False)):
            return None  # not read in the ids' order: the set may not be the newest
    else:
        rows = conn.execute(
            "SELECT id, sz FROM entries_fts_docsize WHERE id IN (SELECT value FROM json_each(?))",
            (_encode_ids(sorted(tf)),)).fetchall()
    score = bm25.Scorer(stats).score
    seen: dict[tuple[tuple[tuple[str, int], ...], bytes], float] = {}
    scored: list[tuple[float, int]] = []
    for doc, docsize in rows:
        counts = tf[doc]
        key = (tuple(counts.items()), docsize)
        got = seen.get(key)
        if got is None:
            got = seen[key] = score(counts, bm25.docsize_length(docsize))
        scored.append((got, doc))
    scored.sort(reverse=True)
    out: list[StoredEntry] = []
    i = 0
    while i < len(scored) and len(out) < candidates:
        chunk = scored[i: i + max(2 * (candidates - len(out)), 32)]
        i += len(chunk)
        # driven by the ids (CROSS JOIN: a plan by the namespace's index read its every row)
        rows = conn.execute(
            f"SELECT {_COLUMNS}, e.id, c.c1 FROM json_each(?) j CROSS JOIN entries e"
            f" ON e.id = j.value CROSS JOIN entries_fts_content c ON c.id = e.id WHERE {where}",
            [_encode_ids([doc for _, doc in chunk]), *params]).fetchall()
        found = {r[10]: r for r in rows}
        for s, doc in chunk:
            r = found.get(doc)
            if r is None:
                continue
            entry = _row(r, doc)
            entry.relevance, entry.keyword = coverage(kept, r[11]), s
            out.append(entry)
            if len(out) == candidates:
                break
    return out


def _match(scope: Scope, terms: tuple[str, ...], scoped: bool = True) -> str:
    """The FTS5 MATCH of any of `terms` in the namespace of `scope` (`scoped`), or in the whole
    index (a caller that keeps to the namespace by other means, see `_layout`)."""
    body = f"body : ({fts_match_expression(terms)})"
    return f'scope : "{scope_token(scope.namespace)}" AND {body}' if scoped else body


_FEW_OTHERS = 8  # other namespaces whose rows `_layout` subtracts (more: the scope token)
_FEW_ROWS = 2000  # ... and their rows in all at most (more: the scope token)


@dataclass(frozen=True, slots=True)
class _Layout:
    """How a search keeps to its namespace in the keyword index.

    `scoped`: with the namespace's `scope` token in the MATCH (FTS5 intersects the term's
    postings with the token's, one posting a namespace row: at a million rows in one namespace
    a rare term's ~1,000 matches cost ~5 ms of page reads, newest first ~8 ms, against ~0.1 ms
    for the term alone). Otherwise the other namespaces are few and small: `others` (their
    scope tokens, at most `_FEW_OTHERS`) with `rest` rows in all, at most `_FEW_ROWS` and at
    most the namespace's: the search matches the terms alone and keeps to the namespace by
    the join on `entries` (`e.namespace`), which reads at most `rest` rows of theirs, and a
    term's rows in the namespace are its rows in the index less its rows in `others` (a MATCH
    of their small postings). Larger other namespaces keep the token: a term common in theirs
    and rare in this one would walk their rows."""

    scoped: bool
    others: tuple[str, ...] = ()
    rest: int = 0


def _layout(conn: sqlite3.Connection, token: str) -> _Layout:
    """The `_Layout` of a search of the namespace of scope `token` (reads at most
    `_FEW_OTHERS` + 1 rows of `keyword_stats`)."""
    got = conn.execute("SELECT scope, rows FROM keyword_stats WHERE rows > 0 LIMIT ?",
                       (_FEW_OTHERS + 2,)).fetchall()
    if len(got) > _FEW_OTHERS + 1:
        return _Layout(True)
    mine = sum(n for s, n in got if s == token)
    others = tuple(s for s, n in got if s != token)
    rest = sum(n for s, n in got if s != token)
    if mine == 0 or rest > mine or rest > _FEW_ROWS:
        return _Layout(True)
    return _Layout(False, others, rest)


def _term_rows(conn: sqlite3.Connection, token: str, term: str, cap: int,
               layout: _Layout) -> int:
    """Keyword rows of the namespace of scope `token` holding `term`, counted up to `cap` + 1
    (all of them with `cap` <= 0): by the index alone."""
    if layout.scoped:
        match = f'scope : "{token}" AND body : "{term}"'
    else:
        match = f'body : "{term}"'
    if cap > 0:
        limit = cap + 1 + layout.rest
        n = int(conn.execute("SELECT count(*) FROM (SELECT 1 FROM entries_fts"
                             " WHERE entries_fts MATCH ? LIMIT ?)", (match, limit)).fetchone()[0])
        if not layout.scoped and n >= limit:
            return cap + 1  # at most `rest` of them are another namespace's
    else:
        n = int(conn.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ?",
                             (match,)).fetchone()[0])
    if layout.scoped or not layout.others:
        return min(n, cap + 1) if cap > 0 else n
    theirs = " OR ".join(f'"{s}"' for s in layout.others)
    n -= int(conn.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ?",
                          (f'scope : ({theirs}) AND body : "{term}"',)).fetchone()[0])
    return min(n, cap + 1) if cap > 0 else n


def keyword_stats(
    conn: sqlite3.Connection, scope: Scope, q: Query, terms: tuple[str, ...], now: float,
    max_term_docs: int = 0, layout: _Layout | None = None,
) -> tuple[tuple[str, ...], Bm25Stats]:
    """The query terms a search of `terms` uses (`selective_terms`) and the namespace's BM25
    statistics for them (`host.store.sqlite.bm25.namespace_stats`)."""
    if not terms:
        return (), Bm25Stats((), (), 0, 0.0)
    with _snapshot(conn):  # the layout, the counts and the namespace's rows of one snapshot
        kept, hits = selective_terms(conn, scope, q, terms, now, max_term_docs, layout)
        return kept, bm25.namespace_stats(conn, scope_token(scope.namespace), kept, hits)


def selective_terms(
    conn: sqlite3.Connection, scope: Scope, q: Query, terms: tuple[str, ...], now: float,
    cap: int, layout: _Layout | None = None,
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """`terms` without those in more than `cap` entries `q` lets `scope` read, the rarest kept
    if all are; and the namespace's entries holding each kept term (its BM25 statistic,
    counted up to `cap` + 1; all of them with `cap` <= 0). Common terms weigh little in BM25 but
    cost the most: scoring 40,000 matches took ~150 ms at 100,000 entries; counting a term's
    matches up to `cap` takes ~2 ms. Whether a term is common is decided on the entries the
    reader may read, so another agent's private entries cannot make a term of yours common and
    drop it."""
    token = scope_token(scope.namespace)
    layout = _layout(conn, token) if layout is None else layout
    # the namespace's entries holding each term (cheap: the index alone) ...
    counts = [_term_rows(conn, token, t, cap, layout) for t in terms]
    if cap <= 0 or len(terms) < 2:
        return terms, tuple(counts)
    # ... and, for a term common in the namespace, those the reader may read: is it common
    # for them too? (FTS-driven; CROSS JOIN keeps the plan so; the join keeps to the namespace)
    matches = [_match(scope, (t,), layout.scoped) for t in terms]
    where, params = _where(scope, q, now)
    readable = ("SELECT count(*) FROM (SELECT 1 FROM entries_fts f CROSS JOIN entries e"
                f" ON e.id = f.rowid WHERE entries_fts MATCH ? AND {where} LIMIT ?)")
    seen = [n if n <= cap else int(conn.execute(readable, [m, *params, cap + 1]).fetchone()[0])
            for m, n in zip(matches, counts, strict=True)]
    kept = [i for i, n in enumerate(seen) if n <= cap]
    if not kept:
        kept = [seen.index(min(seen))]
    return tuple(terms[i] for i in kept), tuple(counts[i] for i in kept)


def forget_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    tiers: Sequence[str],
    keys: Sequence[bytes],
    tags: Sequence[str],
    now: float,
    deferred: Deferred | None = None,
) -> int:
    """Delete the live entries matching keys AND tags within `tiers`; the number deleted.

    Their keyword rows are deleted when `deferred` is flushed (without one, before this
    call returns)."""
    where, params = _where(scope, Query(tiers=tuple(tiers), keys=tuple(keys), tags=tuple(tags)), now)
    gone = conn.execute(f"DELETE FROM entries AS e WHERE {where} RETURNING tier, owner, key, tags",
                        params).fetchall()
    if gone:
        log_change(conn, scope.namespace, "forgotten", _removed(gone), now)
        if deferred is None:
            Deferred().flush(conn)
    return len(gone)


def _removed(rows: Sequence[tuple]) -> list[tuple]:
    """Change-log records of deleted rows (tier, owner, key, tags)."""
    return [removed_record(r[0], r[1], r[2].encode(), _tags_decoder.decode(r[3])) for r in rows]


def _log_expired(conn: sqlite3.Connection, rows: Sequence[tuple], now: float) -> None:
    """Log deleted expired rows (namespace, tier, owner, key, tags): one change a namespace."""
    by_ns: dict[str, list[tuple]] = {}
    for r in rows:
        by_ns.setdefault(r[0], []).append(r[1:])
    for ns, mine in by_ns.items():
        log_change(conn, ns, "expired", _removed(mine), now)


def touch_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    tiers: Sequence[str],
    touches: Sequence[tuple[bytes, float]],
) -> int:
    """Record reads: move `updated_at` of each live (key, when) forward to `when`, if later.

    The library's `SQLiteStore` keeps `Memory.last_accessed` there; `SQLiteEntryStore.touch`
    runs it for `EntryStore.touch`. Expiry (`expires_at`: a touch never extends a TTL, and an
    entry expired at `when` is not matched), tags, content and the keyword index are unchanged.
    The number of rows updated.
    """
    n = 0
    for key, when in touches:
        where, params = _where(scope, Query(tiers=tuple(tiers), keys=(key,)), when)
        cur = conn.execute(
            f"UPDATE entries AS e SET updated_at = ? WHERE {where} AND e.updated_at < ?",
            [when, *params, when],
        )
        n += cur.rowcount
    return n


def collect_expired(
    conn: sqlite3.Connection, now: float, batch: int = GC_BATCH, deferred: Deferred | None = None
) -> int:
    """Delete up to `batch` expired entries; the number deleted (call again while == batch).
    Their keyword rows go as in `forget_entries`."""
    rows = conn.execute(
        "DELETE FROM entries WHERE id IN"
        " (SELECT id FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?)"
        " RETURNING namespace, tier, owner, key, tags",
        (now, batch),
    ).fetchall()
    if rows:
        _log_expired(conn, rows, now)
        if deferred is None:
            Deferred().flush(conn)
    return len(rows)


_INSERT = (
    "INSERT INTO entries (namespace, tier, owner, key, agent, content, tags, source,"
    " score, ttl, created_at, updated_at, expires_at, size)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
_INSERT_NEW = _INSERT + " ON CONFLICT DO NOTHING RETURNING id"  # a key already there: no row
_INSERT_ID = _INSERT + " RETURNING id"
_INSERT_TAGS = "INSERT INTO entry_tags (namespace, tier, owner, tag, entry_id) VALUES (?, ?, ?, ?, ?)"


def put_entries(
    conn: sqlite3.Connection,
    scope: Scope,
    entries: Sequence[NewEntry],
    now: float,
    quotas: Quotas,
    deferred: Deferred | None = None,
) -> list[StoreOutcome]:
    """Upsert `entries` (inside the caller's transaction); one outcome per entry.

    An existing live key keeps its `created_at`; an expired one is replaced by a new entry.
    A write past a quota is `memory_full` and leaves the entry as it was (expired rows of the
    namespace are collected first, once, to make room).

    The keyword-index rows and the quota counters' changes go to `deferred` (see
    `host.store.sqlite.deferred`), which the caller flushes before its COMMIT (the writer
    thread: once a commit group); without one they are written when this call ends.
    """
    if deferred is None:
        own = Deferred()
        done = put_entries(conn, scope, entries, now, quotas, own)
        own.flush(conn)
        return done
    ns, agent = scope.namespace, scope.agent
    token = scope_token(ns)
    usage = _Usage(*deferred.usage(conn, ns, agent))
    deleted = collected = False
    evicted = 0  # entries evicted to make room (host.store.sqlite.evict)
    outcomes: list[StoreOutcome] = []
    changed: list[tuple] = []  # the change-log records of the entries stored
    changed_ids: list[int] = []  # ... and their rows
    for e in entries:
        owner = owner_for(e.tier, agent)
        key = e.key.decode()
        updated = e.updated_at if e.updated_at is not None else now
        created = e.created_at if e.created_at is not None else updated
        expires = updated + e.ttl if e.ttl > 0 else None
        content = e.content.decode()
        text = e.text or stored_text(e.content, e.tags, e.key)
        tags = list(dict.fromkeys(e.tags))
        size = stored_bytes(e.key, e.content, tags) + len(e.vectors)
        if not space_fits(conn, ns, e):
            outcomes.append(Refusal.VECTOR_DIMS)
            continue
        tags_json = _encode_tags(tags).decode()
        values = (ns, e.tier, owner, key, agent, content, tags_json, e.source, e.score, e.ttl,
                  created, updated, expires, size)
        entry_id = None
        replaced = False
        if not usage.over(quotas, (1, size), (1, size)):
            # the common case, a new key, in one statement (a key already there inserts nothing)
            got = conn.execute(_INSERT_NEW, values).fetchone()
            if got is not None:
                entry_id = got[0]
                usage.add((1, size), (1, size))
                deferred.count(ns, agent, 1, size)
        if entry_id is None:
            row = conn.execute(
                "SELECT id, expires_at, agent, size, created_at FROM entries"
                " WHERE namespace = ? AND tier = ? AND owner = ? AND key = ?",
                (ns, e.tier, owner, key),
            ).fetchone()
            if row is not None and row[1] is not None and row[1] <= now:
                _log_expired(conn, conn.execute(
                    "DELETE FROM entries WHERE id = ? RETURNING namespace, tier, owner, key, tags",
                    (row[0],)).fetchall(), now)
                deleted = True  # the delete trigger counted it in the table
                usage.add((-1, -row[3]), (-1, -row[3]) if row[2] == agent else (0, 0))
                row = None
            growth: tuple[tuple[int, int], tuple[int, int]]
            if row is None:
                growth = (1, size), (1, size)
            else:  # an update: the namespace grows by the size change, a new writer by the size
                growth = (0, size - row[3]), ((0, size - row[3]) if row[2] == agent else (1, size))
            if usage.over(quotas, *growth) and not collected:
                collected = True
                # through the expiry index (the unary +): by the namespace's rank index each
                # put at a quota walked every entry of the namespace
                _log_expired(conn, conn.execute(
                    "DELETE FROM entries WHERE +namespace = ? AND expires_at IS NOT NULL"
                    " AND expires_at <= ? RETURNING namespace, tier, owner, key, tags",
                    (ns, now),
                ).fetchall(), now)
                deleted = True
                usage = _Usage(*deferred.usage(conn, ns, agent))
            if quotas.evict and usage.over(quotas, *growth):  # limits.on_full "evict"
                gone = make_room(conn, ns, agent, usage, quotas, growth, row, changed_ids, now)
                if gone:
                    evicted, deleted = evicted + gone, True
                    usage = _Usage(*deferred.usage(conn, ns, agent))
            if usage.over(quotas, *growth):
                outcomes.append(Refusal.MEMORY_FULL)
                continue
            usage.add(*growth)
            if row is None:
                entry_id = conn.execute(_INSERT_ID, values).fetchone()[0]
                deferred.count(ns, agent, 1, size)
            else:
                entry_id = row[0]
                created = row[4]
                deferred.count(ns, row[2], -1, -row[3])
                deferred.count(ns, agent, 1, size)
                conn.execute(
                    "UPDATE entries SET agent = ?, content = ?, tags = ?, source = ?, score = ?,"
                    " ttl = ?, updated_at = ?, expires_at = ?, size = ? WHERE id = ?",
                    (agent, content, tags_json, e.source, e.score, e.ttl, updated, expires,
                     size, entry_id),
                )
                conn.execute("DELETE FROM entry_tags WHERE entry_id = ?", (entry_id,))
                deferred.replace(entry_id)
                replaced = True
        if tags:
            conn.executemany(_INSERT_TAGS, [(ns, e.tier, owner, t, entry_id) for t in tags])
        if e.vectors or replaced:
            write_client_vectors(conn, entry_id, e, replaced)
        deferred.index(entry_id, token, text)
        outcomes.append(None)
        changed.append(stored_record(e.tier, owner, e.key, e.content, tags, e.source, e.score,
                                     e.ttl, created, updated))
        changed_ids.append(entry_id)
    if changed:
        log_change(conn, ns, "stored", changed, now, changed_ids)
    if not deleted:  # the usage table is as read: the next put of the group need not read it
        deferred.settled(conn)
    return PutOutcomes(outcomes, evicted) if evicted else outcomes
