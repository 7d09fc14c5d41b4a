"""The SQLite keyword index's BM25, with the statistics of one namespace, for `host.text.bm25`.

FTS5's own `bm25()` reads table-wide statistics (rows, average row length, rows holding each
term): what another namespace stored moved your scores. So the store scores matches itself,
with the formula of `host.text.bm25` and the namespace's own statistics:

- rows and total length (in tokens) of the namespace's keyword rows: the `keyword_stats` table
  (schema migration 6), kept by `host.store.sqlite.deferred` as it writes and drops rows;
- rows holding each query term: counted by the search among the rows the reader may read
  (`host.store.sqlite.keyword.selective_terms`);
- a row's length: FTS5's own count, from its `entries_fts_docsize` record (`row_length`); its
  term counts: the spans FTS5's `highlight()` marks for the query, each stemmed as the index
  stems it (`stems`, cached), or, when the search scores from the index alone
  (`host.store.sqlite.keyword._scored_by_index`), the instances of FTS5's postings (the same
  counts: one marked span an instance of a one-token term).

`Scorer` computes the score from those, for both (the same float either way).

`analyse` gives a text outside the index (a working-tier entry) the terms and length it would
have as a row, so `host.text.bm25.bm25` scores it on the same scale.
"""

from __future__ import annotations

import functools
import math
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Iterator

from host.text.bm25 import K1, Analysis, B, Bm25Stats

__all__ = ["TOKENIZER", "Scorer", "analyse", "docsize_length", "namespace_stats", "row_length",
           "score_rows", "scored_rows", "stems", "MARK_OPEN", "MARK_CLOSE"]

TOKENIZER = "porter unicode61 remove_diacritics 2"  # entries_fts (sqlite_schema, migration 2)
MARK_OPEN, MARK_CLOSE = "\x01", "\x02"  # highlight() around each matched span
_MARKED = re.compile("\x01([^\x02]*)\x02")
_local = threading.local()


def _tokeniser() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:")
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE t_terms USING fts5vocab(t, 'instance')")
        _local.conn = conn
    return conn


def _index_terms(text: str) -> Counter[str]:
    """The index-form terms of `text` with counts, by the index's own tokeniser."""
    conn = _tokeniser()
    with conn:
        conn.execute("INSERT INTO t(rowid, body) VALUES (1, ?)", (text,))
        terms = Counter(r[0] for r in conn.execute("SELECT term FROM t_terms"))
        conn.execute("DELETE FROM t")
    return terms


MAX_KEPT_SPAN = 64  # longer spans' stems are not cached (an entry holds its span)
MAX_KEPT_TEXT = 512  # longer texts' analyses are not cached (an entry holds its text)
MAX_KEPT_SPANS = 8  # `score_rows` keeps the scores of rows of at most this many marked spans


def stems(span: str) -> tuple[str, ...]:
    """The index-form terms (stemmed) of a short span of text, e.g. one token (kept for the
    next queries up to `MAX_KEPT_SPAN` characters: a marked span is a token of a stored text,
    and a client's 60 KB word would stay in memory, 65,536 of them)."""
    return _kept_stems(span) if len(span) <= MAX_KEPT_SPAN else _stems(span)


def _stems(span: str) -> tuple[str, ...]:
    return tuple(_index_terms(span).elements())


_kept_stems = functools.lru_cache(maxsize=65536)(_stems)


def row_length(docsize: bytes) -> int:
    """A row's length in tokens, every column (scope and body), from its `entries_fts_docsize`
    record (one varint a column), as FTS5's `bm25()` counts it."""
    n = i = 0
    while i < len(docsize):
        b = docsize[i]
        if b < 0x80:  # the usual one-byte varint
            n += b
            i += 1
            continue
        v = 0
        for _ in range(8):
            b = docsize[i]
            i += 1
            v = (v << 7) | (b & 0x7F)
            if not b & 0x80:
                break
        else:
            v = (v << 8) | docsize[i]
            i += 1
        n += v
    return n


def analyse(text: str) -> Analysis:
    """`text` as a row of `entries_fts`: its stemmed terms with counts, and its length (the
    body's tokens plus the scope column's one token, as `row_length` counts a row). Kept for
    texts up to `MAX_KEPT_TEXT` characters (16,384 working entries' texts of 64 KB each
    would hold a gigabyte; the working tier keeps each entry's analysis itself)."""
    return _kept_analysis(text) if len(text) <= MAX_KEPT_TEXT else _analyse(text)


def _analyse(text: str) -> Analysis:
    terms = _index_terms(text)
    return Analysis(terms, sum(terms.values()) + 1)


_kept_analysis = functools.lru_cache(maxsize=16384)(_analyse)


class Scorer:
    """BM25 of a row from its term counts and its length, by `host.text.bm25.bm25`'s formula
    with `stats` (the same sums, in the same order, so the same float; inlined: a query scores
    up to `search.max_keyword_matches` rows)."""

    __slots__ = ("_terms", "_avgdl")

    def __init__(self, stats: Bm25Stats) -> None:
        n = stats.rows
        self._avgdl = stats.avgdl if stats.avgdl > 0 else 1.0
        idf = [max(math.log((n - h + 0.5) / (h + 0.5)) if n > 0 else 0.0, 1e-6)
               for h in stats.hits]
        self._terms = list(zip(stats.terms, idf, strict=True))

    def score(self, tf: dict[str, int], d: int) -> float:
        """BM25 of a row of length `d` (in tokens, as `row_length` counts) holding each query
        term (index form) `tf[term]` times."""
        k1p1 = K1 + 1.0
        norm = K1 * (1.0 - B + B * d / self._avgdl)
        score = 0.0
        for term, w in self._terms:
            f = tf.get(term, 0)
            if f:
                score += w * f * k1p1 / (f + norm)
        return score


def docsize_length(docsize: bytes) -> int:
    """`row_length`, with the usual record of two one-byte varints read inline."""
    if len(docsize) == 2 and docsize[0] < 0x80 and docsize[1] < 0x80:
        return docsize[0] + docsize[1]
    return row_length(docsize)


def score_rows(
    stats: Bm25Stats, rows: Iterable[tuple[int, str, bytes]]
) -> list[tuple[float, int, str]]:
    """`scored_rows` as a list."""
    return list(scored_rows(stats, rows))


def scored_rows(
    stats: Bm25Stats, rows: Iterable[tuple[int, str, bytes]]
) -> Iterator[tuple[float, int, str]]:
    """(BM25, rowid, highlighted text) of each (rowid, `highlight()` text, docsize record) row
    (`Scorer`; a row's term counts are its marked spans, each stemmed as the index stems). A
    row's score depends only on its marked spans and its docsize record: rows alike (most, for
    short texts: one span, the same length) are scored once a query; a row of more than
    `MAX_KEPT_SPANS` spans is scored on its own (kept, a long text's spans stayed in memory
    for the whole query, every row's). Lazily, as the rows are read: a caller keeping the
    best (`heapq.nlargest`) holds those only."""
    score = Scorer(stats).score
    findall = _MARKED.findall
    seen: dict[tuple[tuple[str, ...], bytes], float] = {}
    for rowid, hl, docsize in rows:
        key = (tuple(findall(hl)), docsize)
        got = seen.get(key)
        if got is None:
            tf: dict[str, int] = {}
            for span in key[0]:
                for s in stems(span):
                    tf[s] = tf.get(s, 0) + 1
            got = score(tf, docsize_length(docsize))
            if len(key[0]) <= MAX_KEPT_SPANS:
                seen[key] = got
        yield got, rowid, hl


def namespace_stats(
    conn: sqlite3.Connection, token: str, terms: tuple[str, ...], hits: tuple[int, ...]
) -> Bm25Stats:
    """The statistics of the namespace of scope `token` for the query `terms` (as the search
    used them) with `hits` rows holding each: each term in index form, its hits, and the
    namespace's rows and average row length."""
    got = conn.execute("SELECT rows, tokens FROM keyword_stats WHERE scope = ?",
                       (token,)).fetchone()
    rows, total = (int(got[0]), int(got[1])) if got else (0, 0)
    index_terms: list[str] = []
    counts: list[int] = []
    for t, n in zip(terms, hits, strict=True):
        for s in stems(t):
            index_terms.append(s)
            counts.append(n)
    return Bm25Stats(tuple(index_terms), tuple(counts), rows, total / rows if rows > 0 else 0.0)
