"""The ranking's text side (the tokeniser, the pair coverage from kept stems, their bound) and
the order's two rules about evidence: sharing no word with the query, and standing next to a
match."""

from __future__ import annotations

import random
import re

import msgspec
import numpy as np
import pytest

from host.config import SearchConfig
from host.search.ranking import NO_TERM_SHARE, coverages, fused_z, score, zscores
from host.store.records import StoredEntry
from host.text.keyword import Coverage, _fold, pair_coverage, stems, term_weights, tokens
from host.text.searchable import EntryTerms, stored_text

_REGEX = re.compile(r"[^\W_]+", re.UNICODE)  # the tokeniser's definition: runs of letters/digits

TEXTS = [
    "The user's laptop is a ThinkPad X1 with serial number PF3K9Z21.",
    "Melanie said: Yeah, I play clarinet! Started when I was young \u2014 it\u2019s been great.",
    "snake_case_name and __dunder__ and a-b-c and 3.14 and x\ty\nz",
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, na\u00efve co\u00f6perate, \u00c5ngstr\u00f6m",
    "STRASSE stra\u00dfe \u0130stanbul \u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 \ufb01nance \ufb00",
    "\u00bd cup, x\u00b2, \u2163, e\u0301te\u0301, a\u0308\u0323b, \u01c4 \u01c5",
    "\u65e5\u672c\u8a9e \u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4 \u0939\u093f\u0928\u094d\u0926\u0940",
    "",
    "   ",
]


def _random_texts(n: int) -> list[str]:
    rng = random.Random(7)
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            hi = 0x7F if r < 0.4 else 0x2FFF if r < 0.7 else 0xFFFF if r < 0.9 else 0x10FFFF
            c = rng.randint(0, hi)
            chars.append(chr(c) if not 0xD800 <= c <= 0xDFFF else "x")
        out.append("".join(chars))
    return out


def test_tokens_are_the_runs_of_letters_and_digits_of_the_folded_text() -> None:
    """The tokeniser (one translate and a split) gives exactly the maximal runs of letters and
    digits of the case-folded text without diacritics, in any script."""
    for text in TEXTS + _random_texts(3000):
        assert tokens(text) == _REGEX.findall(_fold(text)), repr(text)
    assert tokens("Caf\u00e9 na\u00efve snake_case") == ["cafe", "naive", "snake", "case"]


def test_coverage_from_stems_is_the_pair_coverage() -> None:
    """A query's coverage of a text computed from the text's stems equals `pair_coverage`
    (stop words out, the light stem, common words a third)."""
    queries = ["When do I need to get my teeth checked?", "What lessons does she take?",
               "PF3K9Z21", "Who is Dr. Okafor?", "running lives ladies classes", "the a of"]
    texts = TEXTS + ["She takes lessons on Thursdays.", "He lived there; she lives here.",
                     "Ladies' class, running late", "I need to get new teeth"]
    for q in queries:
        w = term_weights(q)
        for t in texts:
            assert Coverage(w).of(stems(t)) == pytest.approx(pair_coverage(w, t), abs=1e-12)
    assert Coverage({}).of(stems("anything")) == 0.0


def _entry(content: str, key: object = None, tags: tuple[str, ...] = ()) -> StoredEntry:
    return StoredEntry(tier="episodic", owner="a", key=msgspec.json.encode(key or {"k": 1}),
                       content=msgspec.json.encode(content), tags=list(tags), source="",
                       score=0.5, ttl=0, created_at=0.0, updated_at=0.0)


def test_kept_stems_give_the_same_coverage_and_stay_bounded() -> None:
    """`coverages` gives the same figures with the stems kept or computed anew; an entry whose
    content changed is read again; the kept stems never exceed their byte bound (filling it
    empties them) and an entry over a tenth of it is never kept."""
    entries = [_entry(t, {"id": i}, ("tag:value",)) for i, t in enumerate(TEXTS[:6])]
    kept = EntryTerms(max_bytes=100_000)
    q = "Which clarinet does the laptop user play? value"
    first = coverages(q, entries, kept)
    assert len(kept) == len(entries)
    assert np.array_equal(coverages(q, entries, kept), first)
    assert np.array_equal(coverages(q, entries, EntryTerms(0)), first)
    changed = _entry("A clarinet, nothing else", {"id": 1})
    assert coverages("clarinet laptop", [changed], kept)[0] == pytest.approx(0.5)
    assert kept.get(changed.content, changed.tags, changed.key) == stems(
        stored_text(changed.content, changed.tags, changed.key))
    small = EntryTerms(max_bytes=20_000)
    for i in range(200):
        e = _entry(f"entry number {i} about something", {"id": i})
        small.get(e.content, e.tags, e.key)
        assert small._bytes <= small.max_bytes
    assert 0 < len(small) < 200
    big = _entry(" ".join(f"w{i}" for i in range(40)))
    small.get(big.content, big.tags, big.key)
    assert (big.content, tuple(big.tags), big.key) not in small._held


def test_a_candidate_sharing_no_term_is_judged_on_its_cosine() -> None:
    """A candidate with BM25 0 orders at least at its cosine z-score over the vector weight
    plus NO_TERM_SHARE of the keyword weight: the closest entry by meaning is not pushed below
    keyword matches that are far less similar for sharing no word."""
    kw = np.array([5.0, 4.0, 3.0, 0.0, 0.0])
    cos = np.array([0.25, 0.24, 0.23, 0.52, 0.10])
    z = fused_z(kw, cos)
    zv = zscores(cos)
    assert z[3] == pytest.approx(zv[3] / (1 + NO_TERM_SHARE))
    assert z[3] > z[2]
    assert z[4] == pytest.approx(max((zscores(kw)[4] + zv[4]) / 2, zv[4] / (1 + NO_TERM_SHARE)))
    assert z[0] == pytest.approx((zscores(kw)[0] + zv[0]) / 2)  # a match: the mean of both
    z_kw_only = fused_z(kw, cos, 1.0, 0.0)
    assert z_kw_only[3] == pytest.approx(zscores(kw)[3])  # no vector weight: keywords decide


def test_a_neighbour_less_similar_than_the_candidates_is_not_lifted() -> None:
    """Of the two entries written next to a strong match, the one whose cosine is above the
    candidates' mean (blended with the query's reference similarity) is lifted next to it; the
    one below is not lifted, and, brought in only as a neighbour, is dropped."""
    cfg = SearchConfig()
    texts = ["Do you play any instruments?", "Other talk", "More talk", "Yes, the clarinet!",
             "That's a gorgeous song."]
    entries = [_entry(t, {"i": i}) for i, t in enumerate(texts)]
    for i, e in enumerate(entries):
        e.id = 10 + i
        e.keyword = [8.0, 0.0, 1.0, 0.0, 0.0][i]
    sims = np.array([0.55, 0.20, 0.22, 0.40, 0.05])
    weights = [-8.398, 24.303, -28.580, 1.494, 4.672, 4.778]
    links = {13: (10, 1), 14: (10, 1)}
    got = score(list(entries), "Which instrument do you play?", sims, cfg, weights, 0.02,
                links, first=3, added=2)
    ids = [e.id for e in got]
    assert 13 in ids and 14 not in ids
    by_id = {e.id: e for e in got}
    assert by_id[13].fused > by_id[11].fused and by_id[13].fused > by_id[12].fused


def test_long_tokens_are_stemmed_but_not_kept() -> None:
    """A token longer than MAX_KEPT_TOKEN is stemmed like any other but no cache holds it (a
    client's megabyte-long word would otherwise stay in memory)."""
    from host.text import keyword
    word = "x" * 5000 + "ing"
    assert keyword.stem(word) == "x" * 5000
    assert keyword.stems(f"a {word} b") == frozenset({"a", "x" * 5000, "b"})
    assert word not in keyword._STEM_OF
    keyword.stems("some running words")
    assert "running" in keyword._STEM_OF


def test_among_a_few_candidates_the_floor_leans_on_the_reference() -> None:
    """With two candidates (a match at 0.58, a keyword hit at 0.07) the reply written after the
    match (0.19) is above the floor, though below the two's mean; with a hundred candidates the
    floor is nearly their mean."""
    from host.search.ranking import NEIGHBOUR_PRIOR_ROWS, neighbour_floor
    two = np.array([0.58, 0.07, 0.19])
    basis = np.array([True, True, False])
    assert neighbour_floor(two, 0.05, basis) == pytest.approx(
        (0.65 + NEIGHBOUR_PRIOR_ROWS * 0.05) / (2 + NEIGHBOUR_PRIOR_ROWS))
    assert neighbour_floor(two, 0.05, basis) < 0.19 < two[basis].mean()
    many = np.linspace(0.1, 0.5, 100)
    assert neighbour_floor(many, 0.05) == pytest.approx(many.mean(), abs=0.03)
    assert neighbour_floor(np.array([np.nan]), 0.05) == pytest.approx(0.05)


def test_full_caches_are_emptied_not_frozen() -> None:
    """The tokeniser's character table and the stems table, once full, are emptied and keep
    what comes next: a namespace that stored many distinct words (any large memory does) does
    not leave every word met later to the uncached path. Never more than their `MAX`."""
    from host.text import keyword
    stems_of, chars = keyword._STEM_OF, keyword._TOKEN_CHARS
    for i in range(stems_of.MAX - len(stems_of)):
        keyword.stems(f"filler{i}")
    assert len(stems_of) == stems_of.MAX
    assert keyword.stems("zebrafish swimming") == frozenset({"zebrafish", "swimm"})
    assert "swimming" in stems_of and len(stems_of) <= stems_of.MAX
    assert keyword.stem("swimming") == "swimm"
    # 65,536 distinct letters fill the character table
    letters = [chr(c) for c in range(0x4E00, 0x30000) if chr(c).isalpha() and c not in chars]
    keyword.tokens("".join(letters[:chars.MAX - len(chars)]))
    assert len(chars) == chars.MAX
    assert keyword.tokens("\u00c5ngstr\u00f6m \U00030000") == ["angstrom", "\U00030000"]
    assert 0x30000 in chars and len(chars) <= chars.MAX
    assert tokens("Caf\u00e9 na\u00efve snake_case") == ["cafe", "naive", "snake", "case"]


def test_coverage_is_exact_whatever_the_order_of_its_terms() -> None:
    """`Coverage.of` (a set intersection, in hash order) and `pair_coverage` (the query's
    order) give the same float, whatever the order of the weights: a sum of thirds and ones
    taken in another order differed in its last bit (one pair in thirty of common words), and
    a set's order changes with the process's hash seed."""
    rng = random.Random(3)
    words = ("need get want lesson clarinet laptop thing time teeth dentist know go make take"
             " use day good new much").split()
    for _ in range(3000):
        q = " ".join(rng.sample(words, rng.randint(2, 8)))
        t = " ".join(rng.sample(words, rng.randint(1, 10)))
        w = term_weights(q)
        backwards = dict(reversed(list(w.items())))
        got = pair_coverage(w, t)
        assert Coverage(w).of(stems(t)) == got, (q, t)
        assert pair_coverage(backwards, t) == got == Coverage(backwards).of(stems(t)), (q, t)


def test_kept_stems_count_the_memory_they_hold() -> None:
    """What `EntryTerms` counts is at least what it holds: entries of a few words to a few
    hundred, their content, tags and key only in the cache; the memory they then hold is within
    what was counted (counting characters and 64 bytes a stem held about half of it for short
    entries: a set's slots, a string's header, the key's tuple, the dict's slot)."""
    import tracemalloc

    from host.text import keyword
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 10)))
             for _ in range(50_000)]
    for n in (3, 12, 400):
        kept = EntryTerms(max_bytes=1 << 40)
        keyword._STEM_OF.clear()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for i in range(20_000 // n + 200):
            kept.get(msgspec.json.encode({"text": " ".join(rng.choices(words, k=n))}),
                     ["tag:x", f"t{i}"], msgspec.json.encode({"id": i}))
        keyword._STEM_OF.clear()  # the stems' strings held by the cache alone
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert used <= kept._bytes, (n, used, kept._bytes)
