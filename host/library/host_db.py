"""A memory as an entry of the host's database: one way for every library adapter over it.

`SQLiteStore` (synchronous, on a SQLite file) and `EntryStoreMemories` (async, on any
`EntryStore`; what the MCP tools use) both write and rank through this module, so the same
memory gives the same entry bytes, an overwrite keeps the entry's first `created_at` (an upsert,
as on the wire, atomic on every backend) and a search ranks the same candidates the same way
(`ranked_results`): the host's `SearchEngine` gives the candidates their `relevance` (the
calibrated relevance a `memory/retrieve` reports) and `host.search.rank.rank_matches` orders
them as the wire does (relevance, importance from the score, recency from `updated_at`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from host.library.mapping import key_to_id, memory_to_entry, stored_to_memory
from host.library.models import Memory, RetrievalResult
from host.search.rank import RankWeights, rank_matches
from host.store.records import NewEntry, StoredEntry
from protocol.keys import canonical_key

__all__ = ["new_entry", "ranked_results"]


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


def ranked_results(
    found: Iterable[StoredEntry], k: int, weights: RankWeights, now: float,
    touched: Mapping[str, float] | None = None,
) -> list[RetrievalResult]:
    """The best `k` of a `SearchEngine`'s candidates `found`, best first, ranked as a
    `memory/retrieve` with a query ranks them (`rank_matches`): `relevance_score` is the
    entry's `relevance`, `combined_score` its `combined`, exactly as the wire reports them.
    `touched` holds accesses not yet written (id -> time): they count as `updated_at`. Only
    the best `k` are turned into memories."""
    found = list(found)
    if touched:
        for entry in found:
            key = key_to_id(json.loads(entry.key))
            if key in touched:
                entry.updated_at = max(entry.updated_at, touched[key])
    return [
        RetrievalResult(memory=stored_to_memory(entry), relevance_score=float(entry.relevance or 0.0),
                        combined_score=min(1.0, max(0.0, combined)))
        for combined, entry in rank_matches(found, 0.0, now, weights)[:k]
    ]
