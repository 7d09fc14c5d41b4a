"""The keyword search on SQLite: FTS5 candidates scored with BM25 over the namespace's own
statistics (`host.store.sqlite.bm25`), and the plan that keeps a search to its namespace.

A search matches its terms in `entries_fts` either with the namespace's scope token (FTS5
intersects the postings: any size of namespace) or, when the other namespaces are few and small
(`Layout`), with the terms alone; it leaves out terms common among the entries the reader may
read (`selective_terms`), and scores from the index alone when the terms are rare enough
(`_scored_by_index`). Plain functions over one `sqlite3.Connection`; reads run in one snapshot
(`host.store.sqlite.reads.snapshot`).
"""

from __future__ import annotations

import heapq
import sqlite3
from dataclasses import dataclass

import msgspec

from host.store.records import Query, Scope, StoredEntry, scope_token
from host.store.sqlite import bm25
from host.store.sqlite.reads import AFTER, COLUMNS, entry_of, read_where, snapshot
from host.text.bm25 import Bm25Stats
from host.text.keyword import coverage, fts_match_expression

__all__ = [
    "FEW_OTHERS",
    "FEW_ROWS",
    "INDEX_BUDGET",
    "INSTANCES_A_ROW",
    "KEYWORD_ON_LOOP",
    "Layout",
    "keyword_stats",
    "layout_of",
    "match_text",
    "postings",
    "search_entries",
    "search_with_stats",
    "selective_terms",
]

_ids_encoder = msgspec.json.Encoder()


def _encode_ids(ids: list[int]) -> str:
    """`ids` as a JSON array, for `json_each(?)` (text: a BLOB would be read as JSONB)."""
    return _ids_encoder.encode(ids).decode()


INDEX_BUDGET = 16000  # index rows `_scored_by_index` reads at most (see `search_entries`)

# keyword rows (postings of a query's terms) up to which a search runs on the event loop (see
# `postings`): a match costs a docsize read or a highlight() of a row, 5-40 us apiece at a
# million rows (the pages spread), so a few milliseconds at most; more run on a scan thread
KEYWORD_ON_LOOP = 250


def postings(conn: sqlite3.Connection, terms: tuple[str, ...], most: int) -> int:
    """The rows of the whole keyword index holding any of `terms`, counted up to `most` + 1
    through the index alone (every namespace's: at least the namespace's own): what a search
    of `terms` may read, whatever the size of the namespace (~1 us a row)."""
    if not terms:
        return 0
    return int(conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM entries_fts WHERE entries_fts MATCH ? LIMIT ?)",
        (f"body : ({fts_match_expression(terms)})", most + 1)).fetchone()[0])


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
    relevance: bool = True,
) -> list[StoredEntry]:
    """Keyword candidates sharing a term with `terms`, best BM25 first, `relevance` set
    (the share of terms present; None with `relevance` False: a caller that scores the
    candidates itself, the texts of the index not read for it), and `id` and `keyword` (BM25,
    higher is better).

    Only entries `q` lets `scope` read take part, before any cap: the counts of `max_term_docs`,
    the `max_matches` cap and the `candidates` cut all apply to readable entries. BM25 uses the
    namespace's own statistics (`host.store.sqlite.bm25`), never the table's: what another
    namespace stores moves neither results nor scores.

    With `max_term_docs` > 0, terms found in more readable entries than that are left out (see
    `selective_terms`). With `max_matches` > 0, only the newest `max_matches` readable entries
    that match are scored: a query whose terms are all common matched ~37,000 of 100,000
    entries (150-250 ms under load; ~20 ms with 4,000 scored).

    When the kept terms are in at most `index_budget` rows of the whole index and the search
    matches without the scope token (`Layout`), the rows are scored from the index alone
    (`_scored_by_index`: the same rows, scores and order, without reading the entries and
    texts of those that do not make the top `candidates`); 0: never. At a million rows the
    index's way costs less up to ~16,000 matches (a word of ~6,000 rows: ~17 ms instead of
    ~27; of ~22,000 rows: ~26 instead of ~22, the newest 4,000 being close together).
    All of it reads one snapshot (`snapshot`)."""
    return search_with_stats(conn, scope, q, terms, now, candidates, max_term_docs,
                             max_matches, index_budget, relevance)[0]


def search_with_stats(
    conn: sqlite3.Connection, scope: Scope, q: Query, terms: tuple[str, ...], now: float,
    candidates: int, max_term_docs: int = 0, max_matches: int = 0,
    index_budget: int = INDEX_BUDGET, relevance: bool = True,
) -> tuple[list[StoredEntry], Bm25Stats]:
    """`search_entries` (its arguments) and the BM25 statistics it scored its candidates with
    (`keyword_stats`: what scores a text outside the index on its scale), of one snapshot.
    With no tier in `q`, the statistics alone."""
    with snapshot(conn):
        layout = layout_of(conn, scope_token(scope.namespace)) if terms else Layout(True)
        kept, stats = keyword_stats(conn, scope, q, terms, now, max_term_docs, layout)
        if not kept or not q.tiers:
            return [], stats
        return _search_entries(conn, scope, q, kept, stats, layout, now, candidates,
                               max_matches, index_budget, relevance), stats


def _search_entries(
    conn: sqlite3.Connection, scope: Scope, q: Query, kept: tuple[str, ...], stats: Bm25Stats,
    layout: Layout, now: float, candidates: int, max_matches: int, index_budget: int,
    relevance: bool = True,
) -> list[StoredEntry]:
    where, params = read_where(scope, q, now)
    if not layout.scoped and index_budget > 0:
        found = _scored_by_index(conn, kept, stats, where, params, candidates, max_matches,
                                 index_budget, relevance)
        if found is not None:
            return found
    match = match_text(scope, kept, layout.scoped)
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
    rows = {r[AFTER]: r for r in conn.execute(
        f"SELECT {COLUMNS}, e.id FROM entries e WHERE e.id IN ({','.join('?' * len(best))})",
        [rowid for _, rowid, _ in best])}
    out = []
    for s, rowid, hl in best:
        r = rows.get(rowid)
        if r is None:
            continue
        entry = entry_of(r, rowid)
        if relevance:
            body = hl.replace(bm25.MARK_OPEN, "").replace(bm25.MARK_CLOSE, "")
            entry.relevance = coverage(kept, body)
        entry.keyword = s
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


_MARGIN = 16  # rows read beyond `candidates` in the index path's first chunk


def _scored_by_index(
    conn: sqlite3.Connection, kept: tuple[str, ...], stats: Bm25Stats, where: str,
    params: list[object], candidates: int, max_matches: int, budget: int,
    relevance: bool = True,
) -> list[StoredEntry] | None:
    """`search_entries`' result, its rows scored from the index alone, or None when the kept
    terms are in more than `budget` rows of the index, or their instances in more than
    `INSTANCES_A_ROW` times that (or one is not a single index term).

    The matches are read from FTS5's postings with their term counts (`_instances`, the
    counts `highlight()` marks). With `max_matches` > 0 and more matches than that in the
    index, the newest `max_matches` the reader may read are kept (visibility read newest
    first, as the highlight path's LIMIT does); otherwise every match is scored and
    visibility read for the best only. A row's length comes from its docsize record, its
    score from the same `bm25.Scorer`. Then the best are read, entry and text (the indexed
    text for `relevance` only), in chunks until `candidates` are readable. So a rare term's
    thousand matches, spread over a million rows, cost one docsize read each instead of an
    entry, a row, its highlight() and a docsize read. Same order: BM25 desc, then newest."""
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
    # an entry and, for its `relevance`, its indexed text, driven by the ids (CROSS JOIN: a
    # plan by the namespace's index read its every row)
    read = (f"SELECT {COLUMNS}, e.id" + (", c.c1" if relevance else "")
            + " FROM json_each(?) j CROSS JOIN entries e ON e.id = j.value"
            + (" CROSS JOIN entries_fts_content c ON c.id = e.id" if relevance else "")
            + f" WHERE {where}")
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
        # first the best `candidates` and a margin (most are readable), then twice what is
        # missing: reading 2 x candidates rows with their text at once cost ~0.2 ms a query
        chunk = scored[i: i + (candidates + _MARGIN if i == 0
                               else max(2 * (candidates - len(out)), 32))]
        i += len(chunk)
        rows = conn.execute(read, [_encode_ids([doc for _, doc in chunk]), *params]).fetchall()
        found = {r[AFTER]: r for r in rows}
        for s, doc in chunk:
            r = found.get(doc)
            if r is None:
                continue
            entry = entry_of(r, doc)
            if relevance:
                entry.relevance = coverage(kept, r[AFTER + 1])
            entry.keyword = s
            out.append(entry)
            if len(out) == candidates:
                break
    return out


def match_text(scope: Scope, terms: tuple[str, ...], scoped: bool = True) -> str:
    """The FTS5 MATCH of any of `terms` in the namespace of `scope` (`scoped`), or in the whole
    index (a caller that keeps to the namespace by other means, see `layout_of`)."""
    body = f"body : ({fts_match_expression(terms)})"
    return f'scope : "{scope_token(scope.namespace)}" AND {body}' if scoped else body


FEW_OTHERS = 8  # other namespaces whose rows `layout_of` subtracts (more: the scope token)
FEW_ROWS = 2000  # ... and their rows in all at most (more: the scope token)


@dataclass(frozen=True, slots=True)
class Layout:
    """How a search keeps to its namespace in the keyword index.

    `scoped`: with the namespace's `scope` token in the MATCH (FTS5 intersects the term's
    postings with the token's, one posting a namespace row: at a million rows in one namespace
    a rare term's ~1,000 matches cost ~5 ms of page reads, newest first ~8 ms, against ~0.1 ms
    for the term alone). Otherwise the other namespaces are few and small: `others` (their
    scope tokens, at most `FEW_OTHERS`) with `rest` rows in all, at most `FEW_ROWS` and at
    most the namespace's: the search matches the terms alone and keeps to the namespace by
    the join on `entries` (`e.namespace`), which reads at most `rest` rows of theirs, and a
    term's rows in the namespace are its rows in the index less its rows in `others` (a MATCH
    of their small postings). Larger other namespaces keep the token: a term common in theirs
    and rare in this one would walk their rows."""

    scoped: bool
    others: tuple[str, ...] = ()
    rest: int = 0


def layout_of(conn: sqlite3.Connection, token: str) -> Layout:
    """The `Layout` of a search of the namespace of scope `token` (reads at most
    `FEW_OTHERS` + 1 rows of `keyword_stats`)."""
    got = conn.execute("SELECT scope, rows FROM keyword_stats WHERE rows > 0 LIMIT ?",
                       (FEW_OTHERS + 2,)).fetchall()
    if len(got) > FEW_OTHERS + 1:
        return Layout(True)
    mine = sum(n for s, n in got if s == token)
    others = tuple(s for s, n in got if s != token)
    rest = sum(n for s, n in got if s != token)
    if mine == 0 or rest > mine or rest > FEW_ROWS:
        return Layout(True)
    return Layout(False, others, rest)


def _term_rows(conn: sqlite3.Connection, token: str, term: str, cap: int,
               layout: Layout) -> int:
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
    max_term_docs: int = 0, layout: Layout | None = None,
) -> tuple[tuple[str, ...], Bm25Stats]:
    """The query terms a search of `terms` uses (`selective_terms`) and the namespace's BM25
    statistics for them (`host.store.sqlite.bm25.namespace_stats`)."""
    if not terms:
        return (), Bm25Stats((), (), 0, 0.0)
    with snapshot(conn):  # the layout, the counts and the namespace's rows of one snapshot
        kept, hits = selective_terms(conn, scope, q, terms, now, max_term_docs, layout)
        return kept, bm25.namespace_stats(conn, scope_token(scope.namespace), kept, hits)


def selective_terms(
    conn: sqlite3.Connection, scope: Scope, q: Query, terms: tuple[str, ...], now: float,
    cap: int, layout: Layout | None = None,
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """`terms` without those in more than `cap` entries `q` lets `scope` read, the rarest kept
    if all are; and the namespace's entries holding each kept term (its BM25 statistic,
    counted up to `cap` + 1; all of them with `cap` <= 0). Common terms weigh little in BM25 but
    cost the most: scoring 40,000 matches took ~150 ms at 100,000 entries; counting a term's
    matches up to `cap` takes ~2 ms. Whether a term is common is decided on the entries the
    reader may read, so another agent's private entries cannot make a term of yours common and
    drop it."""
    token = scope_token(scope.namespace)
    layout = layout_of(conn, token) if layout is None else layout
    # the namespace's entries holding each term (cheap: the index alone) ...
    counts = [_term_rows(conn, token, t, cap, layout) for t in terms]
    if cap <= 0 or len(terms) < 2:
        return terms, tuple(counts)
    # ... and, for a term common in the namespace, those the reader may read: is it common
    # for them too? (FTS-driven; CROSS JOIN keeps the plan so; the join keeps to the namespace)
    matches = [match_text(scope, (t,), layout.scoped) for t in terms]
    where, params = read_where(scope, q, now)
    readable = ("SELECT count(*) FROM (SELECT 1 FROM entries_fts f CROSS JOIN entries e"
                f" ON e.id = f.rowid WHERE entries_fts MATCH ? AND {where} LIMIT ?)")
    seen = [n if n <= cap else int(conn.execute(readable, [m, *params, cap + 1]).fetchone()[0])
            for m, n in zip(matches, counts, strict=True)]
    kept = [i for i, n in enumerate(seen) if n <= cap]
    if not kept:
        kept = [seen.index(min(seen))]
    return tuple(terms[i] for i in kept), tuple(counts[i] for i in kept)
