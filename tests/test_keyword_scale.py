"""The SQLite keyword search's shortcuts rank as the exhaustive search does.

`sqlite.keyword.search_entries` matches without the namespace's scope token when the namespace
holds most of the index (`_Layout`: a term's rows are then the index's less the few other
namespaces'), and scores from the index alone when the kept terms are in at most
`index_budget` rows (`_scored_by_index`). Each answer here is compared, entries, order, BM25
and relevance, with a reference computed in Python from the rows themselves: every readable
entry of the namespace sharing a kept term (the newest `max_matches`), each scored by
`host.text.bm25.bm25` on `sqlite.bm25.analyse` of its text, with the namespace's statistics
counted from the texts (and the same without `relevance`, for a caller that does not ask for
it). Small stores, caps forced low, both paths of each query.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from host.store.records import NewEntry, Query, Quotas, Scope, scope_token
from host.store.sqlite import keyword, writes
from host.store.sqlite.bm25 import analyse, stems
from host.store.sqlite.deferred import Deferred
from host.store.sqlite.schema import connect, migrate
from host.text.bm25 import Bm25Stats, bm25
from host.text.keyword import coverage, query_terms

NOW = 1_700_000_000.0
TIERS = ("episodic", "semantic")
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"
         " november oscar papa quebec romeo sierra tango running runs runner").split()
QUERIES = ("alpha", "tango", "runs", "alpha bravo", "sierra tango romeo", "running papa alpha",
           "alpha bravo charlie delta", "nothing here", "quebec quebec")


def _texts(n: int, seed: int) -> list[str]:
    """`n` texts of 1-12 words, the first words of `WORDS` the most common, some repeated."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return [" ".join(rng.choices(WORDS, weights, k=rng.randint(1, 12))) for _ in range(n)]


def _fill(conn: sqlite3.Connection, namespace: str, texts: list[str], first: int) -> None:
    """Store `texts` in `namespace`: alice's episodic, bob's episodic (alice may not read
    them) and the semantic tier in turn, one transaction."""
    quotas = Quotas(max_entries_per_namespace=10**6, max_entries_per_agent=10**6)
    deferred = Deferred()
    conn.execute("BEGIN IMMEDIATE")
    for i, text in enumerate(texts, start=first):
        agent, tier = [("alice", "episodic"), ("bob", "episodic"), ("alice", "semantic")][i % 3]
        e = NewEntry(tier=tier, key=json.dumps(f"k{i}").encode(),
                     content=json.dumps({"text": text}).encode(), text=text,
                     created_at=NOW - 10_000 + i, updated_at=NOW - 10_000 + i)
        assert writes.put_entries(conn, Scope(namespace, agent), [e], NOW, quotas,
                               deferred) == [None]
    deferred.flush(conn)
    conn.execute("COMMIT")


def _reference(conn: sqlite3.Connection, scope: Scope, text: str, candidates: int,
               cap: int, max_matches: int) -> list[tuple[int, float, float]]:
    """(id, BM25, relevance) of the exhaustive search, from the stored texts alone."""
    rows = conn.execute("SELECT e.id, e.tier, e.owner, f.body FROM entries e"
                        " JOIN entries_fts f ON f.rowid = e.id WHERE e.namespace = ?",
                        (scope.namespace,)).fetchall()
    readable = [r for r in rows if r[1] == "semantic" or r[2] == scope.agent]
    terms = query_terms(text)
    held = {r[0]: analyse(r[3]) for r in rows}

    def holding(t: str, among: list) -> int:
        (s,) = stems(t)
        return sum(1 for r in among if held[r[0]].terms.get(s))

    counts = [holding(t, rows) for t in terms]
    if cap > 0:
        counts = [min(n, cap + 1) for n in counts]
        if len(terms) > 1:
            seen = [n if n <= cap else min(holding(t, readable), cap + 1)
                    for t, n in zip(terms, counts, strict=True)]
            keep = [i for i, n in enumerate(seen) if n <= cap] or [seen.index(min(seen))]
            terms = tuple(terms[i] for i in keep)
            counts = [counts[i] for i in keep]
    index_terms = [stems(t)[0] for t in terms]
    total = sum(a.length for a in held.values())
    stats = Bm25Stats(tuple(index_terms), tuple(counts), len(rows),
                      total / len(rows) if rows else 0.0)
    matches = sorted((r for r in readable if any(held[r[0]].terms.get(s) for s in index_terms)),
                     key=lambda r: -r[0])
    if max_matches > 0:
        matches = matches[:max_matches]
    scored = sorted(((bm25(stats, held[r[0]]), r[0], r[3]) for r in matches),
                    key=lambda x: (-x[0], -x[1]))
    return [(rowid, s, coverage(terms, body)) for s, rowid, body in scored[:candidates]]


def _search(conn: sqlite3.Connection, scope: Scope, text: str, candidates: int, cap: int,
            max_matches: int, budget: int, relevance: bool = True
            ) -> list[tuple[int, float, float]]:
    got = keyword.search_entries(conn, scope, Query(tiers=TIERS), query_terms(text), NOW,
                             candidates, cap, max_matches, budget, relevance)
    return [(e.id, e.keyword, e.relevance) for e in got]  # type: ignore[misc]


def _all_paths_agree(conn: sqlite3.Connection, scope: Scope) -> int:
    """Every query under caps on and off, both scoring paths, against `_reference`; the
    number of (query, caps) answers compared that had results."""
    answered = 0
    for text in QUERIES:
        for cap, max_matches, candidates in ((0, 0, 10), (40, 0, 10), (40, 25, 5), (8, 6, 50),
                                             (1000, 1000, 1000)):
            want = _reference(conn, scope, text, candidates, cap, max_matches)
            for budget in (0, 3, 30, keyword.INDEX_BUDGET):  # 0: never from the index alone
                got = _search(conn, scope, text, candidates, cap, max_matches, budget)
                assert got == want, (text, cap, max_matches, candidates, budget)
                # a caller that scores the candidates itself: the same ones, no relevance
                bare = _search(conn, scope, text, candidates, cap, max_matches, budget, False)
                assert bare == [(i, s, None) for i, s, _r in want], (text, budget)
            answered += bool(want)
    return answered


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    c = connect(str(tmp_path / "kw.db"))
    migrate(c)
    return c


def test_one_namespace(conn: sqlite3.Connection) -> None:
    """The namespace is the whole index: no scope token, terms counted by the index alone."""
    _fill(conn, "big", _texts(400, 1), 0)
    assert keyword.layout_of(conn, scope_token("big")) == keyword.Layout(False, (), 0)
    assert _all_paths_agree(conn, Scope("big", "alice")) > 20
    assert _all_paths_agree(conn, Scope("big", "bob")) > 20


def test_namespace_among_a_few(conn: sqlite3.Connection) -> None:
    """A namespace of most of the index beside two small ones that share its words: it
    matches without its scope token and subtracts theirs; they keep their token."""
    _fill(conn, "big", _texts(300, 2), 0)
    _fill(conn, "small", _texts(60, 3), 300)
    _fill(conn, "tiny", _texts(7, 4), 360)
    layout = keyword.layout_of(conn, scope_token("big"))
    assert not layout.scoped and layout.rest == 67
    assert sorted(layout.others) == sorted([scope_token("small"), scope_token("tiny")])
    assert keyword.layout_of(conn, scope_token("small")).scoped
    for ns in ("big", "small", "tiny"):
        assert _all_paths_agree(conn, Scope(ns, "alice")) > 0


def test_large_other_namespace(conn: sqlite3.Connection) -> None:
    """Another namespace past `_FEW_ROWS` rows: every search keeps its scope token."""
    _fill(conn, "big", _texts(keyword.FEW_ROWS + 300, 9), 0)
    _fill(conn, "other", _texts(keyword.FEW_ROWS + 1, 10), 10**6)
    assert keyword.layout_of(conn, scope_token("big")).scoped
    assert _all_paths_agree(conn, Scope("big", "alice")) > 20


def test_many_namespaces(conn: sqlite3.Connection) -> None:
    """Past `_FEW_OTHERS` other namespaces, every search keeps its scope token."""
    _fill(conn, "big", _texts(200, 5), 0)
    for k in range(keyword.FEW_OTHERS + 1):
        _fill(conn, f"ns{k}", _texts(5, 10 + k), 200 + 5 * k)
    assert keyword.layout_of(conn, scope_token("big")).scoped
    assert _all_paths_agree(conn, Scope("big", "alice")) > 20
    assert _all_paths_agree(conn, Scope("ns3", "alice")) > 0


def test_stale_rows_and_forgotten_entries(conn: sqlite3.Connection) -> None:
    """Entries forgotten (their keyword rows deleted at the flush) and the index's layout
    changing as namespaces fill: the answers stay the reference's."""
    _fill(conn, "big", _texts(150, 6), 0)
    conn.execute("BEGIN IMMEDIATE")
    gone = writes.forget_entries(conn, Scope("big", "alice"), ["semantic"],
                              [json.dumps(f"k{i}").encode() for i in range(2, 150, 9)], [], NOW)
    conn.execute("COMMIT")
    assert gone > 10
    assert _all_paths_agree(conn, Scope("big", "alice")) > 20
    _fill(conn, "other", _texts(200, 7), 1000)  # now "big" is the smaller: scoped
    assert keyword.layout_of(conn, scope_token("big")).scoped
    assert _all_paths_agree(conn, Scope("big", "alice")) > 20


def test_bench_keyword_tiny_run(tmp_path: Path) -> None:
    """scripts/bench/bench_keyword.py on a tiny store: every kind timed, and with --check every
    answer is the exhaustive scoring's."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parent.parent / "scripts"
                             / "bench" / "bench_keyword.py"),
         "--sizes", "1500", "--queries", "2", "--check", "--json", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True)
    kinds = json.loads(out.stdout)["sizes"]["1500"]["kinds"]
    assert set(kinds) == {"rare", "mid", "common", "mixed-2", "mixed-3", "mixed-4"}
    assert all(k["same_as_exhaustive"] == "2/2" for k in kinds.values())
    assert kinds["common"]["results"] == 100


def test_filters_read_alike(conn: sqlite3.Connection) -> None:
    """Tags, keys and expiry filter the rows scored from the index alone as they filter the
    highlight path's (`index_budget` 0): the same entries, order, BM25 and relevance."""
    quotas = Quotas(max_entries_per_namespace=10**6, max_entries_per_agent=10**6)
    deferred = Deferred()
    conn.execute("BEGIN IMMEDIATE")
    for i, text in enumerate(_texts(300, 8)):
        e = NewEntry(tier=TIERS[i % 2], key=json.dumps(f"k{i}").encode(),
                     content=json.dumps({"text": text}).encode(), text=text,
                     tags=[f"t{i % 3}", "all"] if i % 5 else [],
                     ttl=50 if i % 7 == 0 else 0,  # updated at NOW - 100 + i: i < 50 expired
                     created_at=NOW - 100 + i, updated_at=NOW - 100 + i)
        assert writes.put_entries(conn, Scope("big", "alice"), [e], NOW, quotas,
                               deferred) == [None]
    deferred.flush(conn)
    conn.execute("COMMIT")
    scope = Scope("big", "alice")
    keys = tuple(json.dumps(f"k{i}").encode() for i in range(0, 300, 4))
    for q in (Query(tiers=TIERS), Query(tiers=("semantic",)), Query(tiers=TIERS, tags=("t1",)),
              Query(tiers=TIERS, tags=("t2", "all")), Query(tiers=TIERS, keys=keys),
              Query(tiers=("episodic",), keys=keys, tags=("all",))):
        for text in QUERIES:
            for cap, max_matches, candidates in ((0, 0, 20), (30, 12, 5), (1000, 1000, 300)):
                ways = [[(e.id, e.keyword, e.relevance, e.key) for e in keyword.search_entries(
                    conn, scope, q, query_terms(text), NOW, candidates, cap, max_matches,
                    budget)] for budget in (0, 10, keyword.INDEX_BUDGET)]
                assert ways[0] == ways[1] == ways[2], (q, text, cap, max_matches)
                assert all(int(k.decode().strip('"k')) % 7 or int(k.decode().strip('"k')) >= 50
                           for *_, k in ways[0])  # the expired are not read


def test_a_search_reads_one_snapshot(tmp_path: Path) -> None:
    """Another connection commits a new namespace sharing the query's words between the
    search's layout decision and its term counts (each statement of an autocommit reader is
    its own snapshot): the search still reads one snapshot, so the new namespace's rows are
    not counted as the reader's (its BM25 statistics and scores are those of the search run
    before the commit)."""
    path = str(tmp_path / "kw.db")
    conn, other = connect(path), connect(path)
    migrate(conn)
    _fill(conn, "big", _texts(200, 11), 0)
    scope = Scope("big", "alice")
    want = _search(conn, scope, "alpha bravo", 10, 0, 0, 0)
    assert want
    fired: list[str] = []

    def after_layout(sql: str) -> None:
        # the statement after the layout's: its first count of a term's rows
        if not fired and "entries_fts MATCH" in sql:
            fired.append(sql)
            _fill(other, "late", ["alpha bravo"] * 250, 10**6)

    conn.set_trace_callback(after_layout)
    try:
        got = _search(conn, scope, "alpha bravo", 10, 0, 0, 0)
    finally:
        conn.set_trace_callback(None)
    assert fired and not conn.in_transaction
    assert got == want
    assert keyword.layout_of(conn, scope_token("big")).scoped  # the next search sees "late"
    assert _search(conn, scope, "alpha bravo", 10, 0, 0, 0) == want


def test_long_spans_and_texts_are_analysed_but_not_kept() -> None:
    """A span longer than `MAX_KEPT_SPAN` or a text longer than `MAX_KEPT_TEXT` is stemmed and
    analysed as any other, but no cache holds it (65,536 spans or 16,384 texts of a client's
    64 KB entries would stay in memory); short ones are kept."""
    from host.store.sqlite import bm25 as sqlite_bm25
    word = "x" * 5000 + "ing"
    spans, texts = sqlite_bm25._kept_stems, sqlite_bm25._kept_analysis
    before = spans.cache_info().currsize, texts.cache_info().currsize
    assert stems(word) == ("x" * 5000 + "ing",) and stems("running") == ("run",)
    long_text = " ".join(["running dogs"] * 300)
    got = analyse(long_text)
    assert got.terms == {"run": 300, "dog": 300} and got.length == 601
    assert analyse("running dogs").terms == {"run": 1, "dog": 1}
    assert spans.cache_info().currsize <= before[0] + 1  # "running" only
    assert texts.cache_info().currsize <= before[1] + 1  # "running dogs" only
    spans_now = spans.cache_info().currsize
    stems(word)
    assert spans.cache_info().currsize == spans_now


def test_a_term_the_index_splits_is_scored_as_the_highlight_path(
        conn: sqlite3.Connection) -> None:
    """A query term that the index's tokeniser (Unicode 6.1) splits in two beside one it
    reads as no term at all (New Tai Lue vowel signs, letters to Python, separators to FTS5):
    as many index terms as query terms, but not one each. Scored from the index alone the two
    halves were matched as two words (every row holding either); the search answers as the
    highlight path, which matches the phrase."""
    _fill(conn, "big", ["alpha bravo", "alpha charlie", "bravo delta", "alpha bravo alpha"] * 6,
          0)
    query = "alpha\u19b0bravo \u19b1"
    scope = Scope("big", "alice")
    want = _search(conn, scope, query, 10, 0, 0, 0)
    assert want and len(want) < 12
    for budget in (30, keyword.INDEX_BUDGET):
        assert _search(conn, scope, query, 10, 0, 0, budget) == want


def test_a_word_repeated_in_every_row_is_not_read_instance_by_instance(
        conn: sqlite3.Connection) -> None:
    """The index path reads a term's postings one instance a row; a word repeated a thousand
    times in each of a thousand rows (within the row budget) was a million instances held in
    a list before any was scored. Past `INSTANCES_A_ROW` instances a budgeted row the search
    answers by the highlight path: the same answer, the memory of a few rows."""
    import tracemalloc
    _fill(conn, "big", [" ".join(["alpha"] * 1000)] * 1000 + ["alpha bravo"] * 5, 0)
    scope = Scope("big", "alice")
    want = _search(conn, scope, "alpha", 10, 0, 0, 0)
    assert len(want) == 10
    tracemalloc.start()
    got = _search(conn, scope, "alpha", 10, 0, 0, keyword.INDEX_BUDGET)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got == want
    assert peak < 8 << 20, peak


def test_rows_alike_are_kept_by_a_few_spans_only(conn: sqlite3.Connection) -> None:
    """`score_rows` scores rows alike once a query, by their marked spans and docsize; a
    row of hundreds of marked spans (a long text of the query's words) is scored on its own,
    not kept: six hundred such rows, each unlike the others, held every span of every row."""
    import tracemalloc
    rng = random.Random(12)
    texts = [" ".join(rng.choice(("alpha", "Alpha", "ALPHA", "bravo")) for _ in range(600))
             for _ in range(600)]
    _fill(conn, "big", texts, 0)
    scope = Scope("big", "alice")
    tracemalloc.start()
    got = _search(conn, scope, "alpha", 10, 0, 0, 0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got == _reference(conn, scope, "alpha", 10, 0, 0)
    assert peak < 4 << 20, peak


def test_the_highlight_path_keeps_the_best_rows_only(conn: sqlite3.Connection) -> None:
    """The highlight path scores its matches as they are read and keeps the best
    `candidates`: four hundred long texts sharing one word were all held, highlighted, until
    the last was scored (with 64 KB entries and 4,000 matches, 256 MB a query)."""
    import tracemalloc
    _fill(conn, "big", [f"alpha {' '.join(['bravo'] * 3000)} {i}" for i in range(400)], 0)
    scope = Scope("big", "alice")
    tracemalloc.start()
    got = _search(conn, scope, "alpha", 10, 0, 0, 0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got == _reference(conn, scope, "alpha", 10, 0, 0)
    assert peak < 3 << 20, peak
