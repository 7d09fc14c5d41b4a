"""The SQLite keyword index's view of a text and of a query, for `host.text.bm25`.

`analyse` tokenises and stems a text with the index's own tokeniser (FTS5 `porter unicode61
remove_diacritics 2`, run in a private in-memory FTS5 table), so a working-tier entry's terms are
exactly those the index would hold. `keyword_stats` reads what FTS5's `bm25()` reads: the rows of
`entries_fts` and their total length (its averages record) and the rows holding each query term
(an `fts5vocab` table on the reader's connection). With both, `host.text.bm25.bm25` gives a
text the score FTS5 would give it as a row (checked against FTS5 in tests/test_search_bm25.py).
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections import Counter

from host.text.bm25 import Analysis, Bm25Stats

__all__ = ["analyse", "keyword_stats", "TOKENIZER"]

TOKENIZER = "porter unicode61 remove_diacritics 2"  # entries_fts (sqlite.schema, migration 2)
_local = threading.local()


def _tokeniser() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:")
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE t_terms USING fts5vocab(t, 'instance')")
        _local.conn = conn
    return conn


@functools.lru_cache(maxsize=16384)
def analyse(text: str) -> Analysis:
    """`text` as a row of `entries_fts`: its stemmed terms with counts, and its length (the
    body's tokens plus the scope column's one token, as `bm25()` counts a row)."""
    conn = _tokeniser()
    with conn:
        conn.execute("INSERT INTO t(rowid, body) VALUES (1, ?)", (text,))
        terms = Counter(r[0] for r in conn.execute("SELECT term FROM t_terms"))
        conn.execute("DELETE FROM t")
    return Analysis(terms, sum(terms.values()) + 1)


def _varint(block: bytes, i: int) -> tuple[int, int]:
    """SQLite's big-endian varint at `block[i]`: (value, next index)."""
    v = 0
    for _ in range(8):
        b = block[i]
        i += 1
        v = (v << 7) | (b & 0x7F)
        if not b & 0x80:
            return v, i
    return (v << 8) | block[i], i + 1


def keyword_stats(conn: sqlite3.Connection, terms: tuple[str, ...]) -> Bm25Stats:
    """The statistics of `entries_fts` for the query `terms` (as `search_entries` used them,
    after `selective_terms`): each term stemmed, the rows holding it, rows and average length.
    Those of the whole table, every namespace, as FTS5's bm25() reads them."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.entries_fts_rows"
                 " USING fts5vocab(main, entries_fts, 'row')")
    stems = [s for t in terms for s in analyse(t).terms]
    hits = []
    for s in stems:
        row = conn.execute("SELECT doc FROM temp.entries_fts_rows WHERE term = ?", (s,)).fetchone()
        hits.append(int(row[0]) if row else 0)
    got = conn.execute("SELECT block FROM entries_fts_data WHERE id = 1").fetchone()
    rows = length = 0
    if got and got[0]:
        block = bytes(got[0])
        rows, i = _varint(block, 0)
        while i < len(block):  # one total a column: scope, body
            n, i = _varint(block, i)
            length += n
    return Bm25Stats(tuple(stems), tuple(hits), rows, length / rows if rows else 0.0)
