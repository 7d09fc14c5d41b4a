"""A memory as an entry of the host's database: one way for every library adapter over it.

`SQLiteStore` (synchronous, on a SQLite file) and `EntryStoreMemories` (async, on any
`EntryStore`; what the MCP tools use) both write and rank through this module, so the same
memory gives the same entry bytes, an overwrite keeps the entry's first `created_at` (an upsert,
as on the wire, atomic on every backend) and a search ranks the same candidates the same way:
relevance as the store computed it (the share of the query's terms in the searchable text),
importance from the score, recency from `updated_at`, with `host.search.rank`'s formula.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from host.library.mapping import (
    IMPORTANCE_SCORE,
    key_to_id,
    memory_to_entry,
    score_to_importance,
    stored_to_memory,
)
from host.library.models import Memory, RetrievalResult
from host.library.search import scored, top
from host.search.rank import RankWeights
from host.store.base import NewEntry, StoredEntry
from protocol.keys import canonical_key

__all__ = ["new_entry", "rank"]


def new_entry(key: str, memory: Memory, working_tier: str = "working") -> NewEntry:
    """The entry of `memory` stored under `key`; a working memory goes to `working_tier` (a
    store without sessions keeps it in "episodic", its `type:working` tag keeping its type)."""
    e = memory_to_entry(memory, key)
    return NewEntry(
        tier=working_tier if e["tier"] == "working" else e["tier"],
        key=canonical_key(e["key"]),
        content=json.dumps(e["content"], ensure_ascii=False, separators=(",", ":")).encode(),
        tags=e["tags"],
        source=e["source"],
        score=e["score"],
        ttl=e["ttl"],
        text=memory.content,
        created_at=e["created_at"],
        updated_at=e["updated_at"],
    )


def rank(
    found: Iterable[StoredEntry], k: int, weights: RankWeights, now: float,
    touched: Mapping[str, float] | None = None,
) -> list[RetrievalResult]:
    """The best `k` of the candidates `found` (with `relevance` set by the search), best first.
    `touched` holds accesses not yet written (id -> time): they count as `updated_at`. Only
    the best `k` are turned into memories."""
    matches = []
    for entry in found:
        relevance = entry.relevance or 0.0
        if relevance <= 0:
            continue
        key = key_to_id(json.loads(entry.key))
        if touched and key in touched:
            entry.updated_at = max(entry.updated_at, touched[key])
        importance = IMPORTANCE_SCORE[score_to_importance(entry.score)]
        matches.append(scored(key, relevance, importance, entry.updated_at, entry, weights, now))
    return [
        RetrievalResult(memory=stored_to_memory(entry), relevance_score=relevance,
                        combined_score=combined)
        for combined, relevance, _, _, entry in top(matches, k)
    ]
