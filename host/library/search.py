"""The in-process stores' own keyword search (`InMemoryStore(search=False)`, `JSONFileStore(...,
search=False)`), the fallback where no host database may be made: by default every library
store searches with the host's engine instead (`host.library.mirror`, `host.library.searcher`).
Keyword relevance, then the host's ranking formula:

    relevance = (query terms found in the memory's content) / (query terms)   (host.text.keyword)
    combined  = host.search.rank.combined_score(relevance, importance score, last_accessed, now)

The importance score is the level's wire score (`host.library.mapping.IMPORTANCE_SCORE`), the
recency is that of `last_accessed`. A memory matches only when it shares at least one term with
the query (relevance > 0), as on the wire. Results come best first: by combined score, then by
relevance, then fresher first, then by key, so equal inputs always give the same order.

Each memory's tokens are computed once, when it is stored (`make_row`); a search costs one set
intersection per row it is given (in-process stores give only the rows sharing a query term,
see `host.library.table`), plus O(log k) each to keep the top k.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from host.library.mapping import IMPORTANCE_SCORE
from host.library.models import Memory, RetrievalResult
from host.search.rank import RankWeights, combined_score
from host.text.keyword import query_terms, tokens
from protocol.validity import valid_at

__all__ = ["Row", "Scored", "make_row", "scored", "search_rows", "top", "touched_row"]

P = TypeVar("P")


@dataclass(slots=True)
class Row:
    """One stored memory with what search needs precomputed. Never mutated once made,
    except `fragment`, a cache of the memory's JSON text that a file store fills in."""

    memory: Memory
    tokens: frozenset[str]
    importance: float
    accessed: float  # last_accessed as Unix seconds
    valid: tuple[float | None, float | None] = (None, None)  # `Memory.window()`
    fragment: str | None = field(default=None)


def make_row(memory: Memory) -> Row:
    """A row for `memory` (which the caller hands over: it must not be changed afterwards).
    ValueError when its window is bad (`Memory.window`): nothing is stored then."""
    return Row(
        memory=memory,
        tokens=frozenset(tokens(memory.content)),
        importance=IMPORTANCE_SCORE[memory.importance],
        accessed=memory.last_accessed.timestamp(),
        valid=memory.window(),
    )


def touched_row(row: Row, when: datetime) -> Row:
    """A copy of `row` whose memory was last accessed at `when` (tokens reused)."""
    return Row(
        memory=row.memory.model_copy(update={"last_accessed": when}),
        tokens=row.tokens,
        importance=row.importance,
        accessed=when.timestamp(),
        valid=row.valid,
    )


# One scored match: (combined, relevance, accessed, key, payload).
Scored = tuple[float, float, float, str, P]


def scored(
    key: str, relevance: float, importance: float, accessed: float, payload: P,
    weights: RankWeights, now: float,
) -> Scored[P]:
    """A match with its combined score (`host.search.rank.combined_score`), ready for `top`."""
    combined = combined_score(relevance, importance, accessed, now, weights)
    return (min(1.0, max(0.0, combined)), relevance, accessed, key, payload)


def top(matches: Iterable[Scored[P]], k: int) -> list[Scored[P]]:
    """The best `k` matches: combined score, then relevance, then fresher, then key."""
    return heapq.nsmallest(k, matches, key=lambda s: (-s[0], -s[1], -s[2], s[3]))


def search_rows(
    rows: Iterable[tuple[str, Row]], query: str, k: int, weights: RankWeights, now: float,
    as_of: float | None = None,
) -> list[RetrievalResult]:
    """The best `k` matches of `query` among `(key, row)` pairs, best first; with `as_of`
    (epoch seconds) only the memories valid then (`protocol.validity.valid_at`).

    Raises `ValueError` when `k` < 1. A query without terms matches nothing.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    terms = query_terms(query)
    if not terms:
        return []
    wanted = frozenset(terms)
    n_terms = len(terms)
    matches = []
    for key, row in rows:
        if as_of is not None and not valid_at(*row.valid, as_of):
            continue
        found = len(wanted & row.tokens)
        if found:
            matches.append(
                scored(key, found / n_terms, row.importance, row.accessed, row, weights, now)
            )
    return [
        RetrievalResult(memory=row.memory.copy_for_store(), relevance_score=relevance,
                        combined_score=combined)
        for combined, relevance, _, _, row in top(matches, k)
    ]
