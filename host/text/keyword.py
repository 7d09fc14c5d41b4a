"""Keyword relevance: the tokeniser and the [0, 1] score shared by every store and tier.

Tokens are maximal runs of letters and digits, case-folded, with diacritics removed (the same
rule as SQLite FTS5's `unicode61 remove_diacritics 2`, so the SQL candidate search and this
module agree). Query terms are the distinct tokens of the query minus common English stop words
(unless nothing else is left).

    relevance = (matched query terms) / (query terms)

so a match needs at least one shared term (the documented floor: relevance > 0), and
`min_score=0.5` keeps entries that share at least half of the query's terms.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["STOP_WORDS", "tokens", "query_terms", "coverage", "fts_match_expression"]

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

STOP_WORDS: frozenset[str] = frozenset(
    """a an and are as at be but by did do does for from had has have he her his how i in is it
    its me my of on or our she so that the their them they this to was we were what when where
    which who whom why will with you your""".split()
)


def _fold(text: str) -> str:
    text = text.casefold()
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def tokens(text: str) -> list[str]:
    """The tokens of `text`, in order, case-folded and without diacritics."""
    return _TOKEN.findall(_fold(text))


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct search terms of a query, in first-seen order, stop words dropped."""
    seen = dict.fromkeys(tokens(query))
    terms = tuple(t for t in seen if t not in STOP_WORDS)
    return terms or tuple(seen)


def coverage(terms: tuple[str, ...], text: str) -> float:
    """The share of `terms` found among the tokens of `text`, in [0, 1]."""
    if not terms:
        return 0.0
    present = set(tokens(text))
    return sum(1 for t in terms if t in present) / len(terms)


def fts_match_expression(terms: tuple[str, ...]) -> str:
    """An FTS5 MATCH expression for any of `terms` (each quoted as a phrase)."""
    return " OR ".join(f'"{t}"' for t in terms)
