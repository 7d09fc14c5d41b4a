"""Okapi BM25 of a text that is not in the keyword index, on the index's own scale.

The working tier lives in process memory, outside the store's keyword index; to rank its entries
against stored ones with the same fusion (`host.search.ranking`), each working entry gets the
BM25 it would have if it were a row of that index: the index's statistics (rows, average row
length, rows holding each query term) and the index's own analysis of the text (its tokeniser
and stemmer, so "running" counts for the query term "run" exactly as in SQL). The formula is
SQLite FTS5's `bm25()` (PostgreSQL's search computes the same):

    idf(t)  = max(ln((N - n_t + 0.5) / (n_t + 0.5)), 1e-6)
    bm25    = sum over query terms t of  idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * D / avgdl))

with k1 = 1.2, b = 0.75, tf the term's count in the text and D the text's length in tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Analysis", "Bm25Stats", "bm25"]

K1 = 1.2
B = 0.75


@dataclass(frozen=True, slots=True)
class Analysis:
    """A text as the keyword index sees it: its terms (index form) with counts, and its length
    in tokens as the index counts it."""

    terms: Mapping[str, int]
    length: int


@dataclass(frozen=True, slots=True)
class Bm25Stats:
    """The keyword index's statistics for one query.

    `terms`: the query's terms in index form (stemmed as the index stems), one per query term
    the store's search used, in order (a term may repeat: each counts, as in SQL).
    `hits`: rows of the index holding each term. `rows`: rows in the index. `avgdl`: average
    row length in tokens.
    """

    terms: tuple[str, ...]
    hits: tuple[int, ...]
    rows: int
    avgdl: float


def bm25(stats: Bm25Stats, text: Analysis) -> float:
    """BM25 of `text` for the query of `stats`, higher is better; 0 when it holds no term."""
    score = 0.0
    n = stats.rows
    avgdl = stats.avgdl if stats.avgdl > 0 else 1.0
    norm = K1 * (1.0 - B + B * text.length / avgdl)
    for term, hits in zip(stats.terms, stats.hits, strict=True):
        tf = text.terms.get(term, 0)
        if tf:
            idf = math.log((n - hits + 0.5) / (hits + 0.5)) if n > 0 else 0.0
            score += max(idf, 1e-6) * tf * (K1 + 1.0) / (tf + norm)
    return score
