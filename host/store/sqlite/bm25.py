"""The SQLite keyword index's BM25, with the statistics of one namespace, for `host.text.bm25`.

FTS5's own `bm25()` reads table-wide statistics (rows, average row length, rows holding each
term): what another namespace stored moved your scores. So the store scores matches itself,
with the formula of `host.text.bm25` and the namespace's own statistics:

- rows and total length (in tokens) of the namespace's keyword rows: the `keyword_stats` table
  (schema migration 5), kept by `host.store.sqlite.deferred` as it writes and drops rows;
- rows holding each query term: counted by the search among the rows the reader may read
  (`host.store.sqlite.ops.selective_terms`);
- a row's length: `length(body)`; its term counts: the spans FTS5's `highlight()` marks for the
  query, each stemmed as the index stems it (`stems`, cached).

`analyse` gives a text outside the index (a working-tier entry) the terms and length it would
have as a row, so `host.text.bm25.bm25` scores it on the same scale.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from collections import Counter

from host.text.bm25 import Analysis, Bm25Stats
from host.text.keyword import tokens

__all__ = ["TOKENIZER", "analyse", "length", "marked", "namespace_stats", "stems", "MARK_OPEN",
           "MARK_CLOSE"]

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


@functools.lru_cache(maxsize=65536)
def stems(span: str) -> tuple[str, ...]:
    """The index-form terms (stemmed) of a short span of text, e.g. one token."""
    return tuple(_index_terms(span).elements())


def length(text: str) -> int:
    """The length of `text` as a row, in tokens: its tokens plus the scope column's one."""
    return len(tokens(text)) + 1


@functools.lru_cache(maxsize=16384)
def analyse(text: str) -> Analysis:
    """`text` as a row of `entries_fts`: its stemmed terms with counts and its `length`."""
    return Analysis(_index_terms(text), length(text))


def marked(highlighted: str, body: str) -> Analysis:
    """A row's counts of the query's terms, from its `highlight()` text (each span the query
    matched between MARK_OPEN and MARK_CLOSE), and its length, from its `body`."""
    counts: Counter[str] = Counter()
    for span in _MARKED.findall(highlighted):
        counts.update(stems(span))
    return Analysis(counts, length(body))


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
