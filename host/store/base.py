"""The store interface under the persistent tiers (episodic, semantic), one for every backend.

A backend (`host/store/sqlite.py`, later `host/store/postgres.py`) implements `EntryStore`.
Entries are addressed by (namespace, tier, owner, canonical key): `owner` is the agent for the
episodic tier and "" for the semantic tier. Keys and contents travel as JSON bytes: the key in
RFC 8785 canonical form (`protocol.keys.canonical_key`), the content exactly as the client sent it.

Visibility is part of every query, never a filter added afterwards: a read for agent A sees
episodic rows whose owner is A and the semantic rows of the namespace, and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = [
    "EntryStore",
    "NewEntry",
    "PERSISTENT_TIERS",
    "Query",
    "Scope",
    "StoredEntry",
    "StoreOutcome",
    "owner_for",
]

PERSISTENT_TIERS: tuple[str, ...] = ("episodic", "semantic")


@dataclass(frozen=True, slots=True)
class Scope:
    """Who is asking: the namespace and the agent identity (already authenticated)."""

    namespace: str
    agent: str


def owner_for(tier: str, agent: str) -> str:
    """The owner column of an entry of `tier` written by `agent` ("" for semantic)."""
    return agent if tier != "semantic" else ""


@dataclass(slots=True)
class NewEntry:
    """One entry to write. `key` is canonical JSON bytes; `content` raw JSON bytes.

    `created_at`/`updated_at` are None on the wire path (the store uses `now`); an import path
    may set them to keep the original timestamps.
    """

    tier: str
    key: bytes
    content: bytes
    tags: list[str] = field(default_factory=list)
    source: str = ""
    score: float = 1.0
    ttl: int = 0
    text: str = ""  # the searchable text (see host.search.text); "" = derive from content
    created_at: float | None = None
    updated_at: float | None = None


@dataclass(slots=True)
class StoredEntry:
    """One entry as read back. `relevance` is set only by a query search."""

    tier: str
    owner: str
    key: bytes
    content: bytes
    tags: list[str]
    source: str
    score: float
    ttl: int
    created_at: float
    updated_at: float
    relevance: float | None = None
    id: int | None = None  # the backend's row id, set by query searches (vector index key)
    keyword: float | None = None  # BM25 of a query search, higher is better (host.search.fusion)


@dataclass(frozen=True, slots=True)
class Query:
    """Filters of a read, ANDed. Empty `keys`/`tags` mean no filter on them.

    `tiers` lists the persistent tiers to read (a subset of PERSISTENT_TIERS).
    `min_score` filters on the stored score (no-query reads) or on relevance (query reads).
    """

    tiers: tuple[str, ...]
    keys: tuple[bytes, ...] = ()
    tags: tuple[str, ...] = ()
    min_score: float = 0.0
    limit: int = 10


# Outcome of one entry of a put: None when stored, else an error code ("memory_full").
StoreOutcome = str | None


@runtime_checkable
class EntryStore(Protocol):
    """What the memory plugin needs from a persistent backend. All methods are coroutines.

    Writes return only after their data is committed (durable). Reads never return expired
    entries (expires at updated_at + ttl when ttl > 0).
    """

    async def open(self) -> None:
        """Create or migrate the schema and start workers. Call once before use."""

    async def close(self) -> None:
        """Finish queued writes, commit, stop workers, release files/connections."""

    def put(
        self, scope: Scope, entries: Sequence[NewEntry], now: float
    ) -> Awaitable[list[StoreOutcome]]:
        """Upsert `entries` for `scope` in one transaction; one outcome per entry, in order.

        Returns an awaitable (a coroutine, or a future that needs no task of its own)."""

    async def find(self, scope: Scope, q: Query, now: float) -> tuple[list[StoredEntry], int]:
        """Entries matching `q` ordered by score desc, updated_at desc; (first `limit`, total)."""

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int
    ) -> list[StoredEntry]:
        """Keyword candidates for `text` matching `q`'s filters, each with `relevance` set.

        Returns at most `candidates` entries; ranking and `limit` are the caller's.
        """

    def forget(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], tags: Sequence[str],
        now: float,
    ) -> Awaitable[int]:
        """Delete the matching entries (with their index rows); the number deleted."""

    async def collect_garbage(self, now: float) -> int:
        """Physically delete expired entries; the number deleted."""

    async def ready(self) -> bool:
        """True when the store answers a trivial query."""
