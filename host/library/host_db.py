"""A memory as an entry of the host's database: one way for every library adapter over it.

`SQLiteStore` (synchronous, on a SQLite file) and `EntryStoreMemories` (async, on any
`EntryStore`; what the MCP tools use) both write and rank through this module, so the same
memory gives the same entry bytes, an overwrite keeps the entry's first `created_at` (an upsert,
as on the wire, atomic on every backend) and a search ranks the same candidates the same way
(`ranked_results`): the host's `SearchEngine` gives the candidates their `relevance` (the
calibrated relevance a `memory/retrieve` reports) and `host.search.rank.rank_matches` orders
them as the wire does (relevance, importance from the score, recency from `updated_at`); the
reply is then judged as the wire judges it (`host.search.judgement`: an update ranks above
what it supersedes; near-duplicates collapse when asked), by `judged` over the store's vectors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from host.library.mapping import key_to_id, memory_to_entry, stored_to_memory
from host.library.models import Memory, RetrievalResult
from host.search import judgement
from host.search.rank import RankWeights, rank_matches
from host.store.interface import EntryStore
from host.store.records import NewEntry, StoredEntry
from protocol.keys import canonical_key

__all__ = ["Ranked", "judged", "new_entry", "ranked", "ranked_results", "results"]

# a query's matches with their combined scores, best first, and what the judgement of the
# reply says each carries (by `id()` of the entry)
Ranked = tuple[list[tuple[float, StoredEntry]], dict[int, judgement.Judged]]


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
        valid_from=e.get("valid_from"),
        valid_until=e.get("valid_until"),
    )


def ranked(found: Iterable[StoredEntry], weights: RankWeights, now: float,
           touched: Mapping[str, float] | None = None) -> list[tuple[float, StoredEntry]]:
    """A `SearchEngine`'s candidates `found` ranked as a `memory/retrieve` with a query ranks
    them (`rank_matches`), best first. `touched` holds accesses not yet written (id -> time):
    they count as `updated_at`."""
    found = list(found)
    if touched:
        for entry in found:
            key = key_to_id(json.loads(entry.key))
            if key in touched:
                entry.updated_at = max(entry.updated_at, touched[key])
    return rank_matches(found, 0.0, now, weights)


async def judged(matches: list[tuple[float, StoredEntry]], store: EntryStore | None,
                 dim: int, supersede: bool = True, collapse: bool = False,
                 now: float | None = None) -> Ranked:
    """`matches` judged as a `memory/retrieve` judges its reply (`judgement.judge`, over the
    vectors `store` keeps; no store, as on a keyword-only host, or neither asked: as they
    were). `now`: the search's instant (its `as_of`, else the time of the search), at which
    the memories' bounds are read (a fact that ended ranks after the one that holds)."""
    if store is None or not (supersede or collapse):
        return matches, {}
    return await judgement.judge(matches, store, dim, supersede=supersede, collapse=collapse,
                                 now=now)


def _id(key: bytes) -> str:
    return key_to_id(json.loads(key))


def results(judged_matches: Ranked, k: int,
            memory_of: Callable[[StoredEntry], Memory] = stored_to_memory,
            ) -> list[RetrievalResult]:
    """The best `k` of judged matches as results: the memory of each entry (`memory_of`),
    `relevance_score` its `relevance`, `combined_score` its `combined`, `supersedes` and
    `collapsed` the ids of what it carries, exactly as the wire reports them. Only the best
    `k` are turned into memories."""
    matches, notes = judged_matches
    out = []
    for combined, entry in matches[:k]:
        note = notes.get(id(entry))
        out.append(RetrievalResult(
            memory=memory_of(entry), relevance_score=float(entry.relevance or 0.0),
            combined_score=min(1.0, max(0.0, combined)),
            supersedes=[_id(x) for x in note.supersedes] if note else [],
            collapsed=[_id(x) for x in note.collapsed] if note else []))
    return out


def ranked_results(
    found: Iterable[StoredEntry], k: int, weights: RankWeights, now: float,
    touched: Mapping[str, float] | None = None,
) -> list[RetrievalResult]:
    """The best `k` of a `SearchEngine`'s candidates `found`, ranked (`ranked`) and not
    judged, as `results`."""
    return results((ranked(found, weights, now, touched), {}), k)
