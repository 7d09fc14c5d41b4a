"""The store interface under the persistent tiers (episodic, semantic), one for every backend.

A backend (`host/store/sqlite/store.py`, `host/store/postgres/store.py`) implements `EntryStore`.
Every optional capability a store may have besides is declared here and only here, as a
`runtime_checkable` protocol: `StoreExtensions`, `ClientVectors` (`ClientSpaceReads` when the
host indexes the client spaces), `KeywordStats`, `TierCounts`, `NotReadyReason`,
`AdjustableQuotas`, the vectors (`VectorQueue`; `VectorStore`, `NamespaceVectors` and
`VectorCatchUp` for a store whose vectors the host indexes in memory, `VectorSearch` for one
that searches them itself), the change log (`ChangeLog`, `ChangeNotices`) and `Browse`. The
part that uses a capability checks it once, with `isinstance`, where it is given the store
(a runtime protocol check inspects every method: never per request), and keeps the answer.
Entries are addressed by (namespace, tier, owner, canonical key): `owner` is the agent for the
episodic tier and "" for the semantic tier. Keys and contents travel as JSON bytes: the key in
RFC 8785 canonical form (`protocol.keys.canonical_key`), the content exactly as the client sent it.

Visibility is part of every query, never a filter added afterwards: a read for agent A sees
episodic rows whose owner is A and the semantic rows of the namespace, and nothing else.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from host.store.filters import Condition, KeyPrefix
from protocol.errors import ErrorCode, ProtocolError

if TYPE_CHECKING:
    import numpy as np

    from host.text.bm25 import Analysis, Bm25Stats

__all__ = [
    "AdjustableQuotas",
    "Browse",
    "BrowseFilter",
    "BrowsedEntry",
    "Change",
    "ChangeLog",
    "ChangeNotices",
    "ClientRows",
    "ClientSpaceReads",
    "ClientVectors",
    "EntryStore",
    "ExportRow",
    "Hits",
    "KeywordStats",
    "NamespaceOverview",
    "NamespaceStats",
    "NamespaceVectors",
    "NearSearch",
    "NewEntry",
    "NotReadyReason",
    "PERSISTENT_TIERS",
    "Pending",
    "Query",
    "Quotas",
    "Refusal",
    "StorageFull",
    "Scope",
    "StoredEntry",
    "StoreAdmin",
    "StoreExtensions",
    "StoredVectors",
    "StoreOutcome",
    "TierCounts",
    "VectorCatchUp",
    "VectorQueue",
    "VectorSearch",
    "VectorStore",
    "digest",
    "owner_for",
    "stored_bytes",
    "scope_token",
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


def stored_bytes(key: bytes, content: bytes, tags: Sequence[str]) -> int:
    """The bytes an entry counts against the byte quotas, on every backend: its canonical key,
    its content and each distinct tag (UTF-8), so that no part a client chooses is free (40
    entries of 900 KB keys once took 118 MiB under a 1 MiB quota that counted 120 bytes)."""
    return len(key) + len(content) + sum(len(t.encode()) for t in dict.fromkeys(tags))


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
    text: str = ""  # the searchable text (see host.text.searchable); "" = derive from content
    created_at: float | None = None
    updated_at: float | None = None
    # client-supplied vectors (the store extension): unit float32 rows, `dims` each, kept in
    # the namespace's space `vector_space`; b"" = none (a put replaces the entry's vectors)
    vectors: bytes = b""
    vector_space: str = ""
    dims: int = 0


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
    keyword: float | None = None  # BM25 of a query search, higher is better (host.search.ranking)
    similarity: float | None = None  # cosine to the query's vector in a query search (None: none)
    # the order among the query's candidates, in (0, 1) (ranks; `relevance` is of the pair
    # query/entry alone: what min_score filters and replies carry), set by a query search
    fused: float | None = None


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
    # the store extensions (host.store.filters): conditions on content values and key
    # prefixes, ANDed with the rest in the query itself; `offset` entries skipped before `limit`
    where: tuple[Condition, ...] = ()
    key_prefix: tuple[KeyPrefix, ...] = ()
    offset: int = 0

    @property
    def narrowed(self) -> bool:
        """True when the read is narrowed by anything beyond its tiers."""
        return bool(self.keys or self.tags or self.where or self.key_prefix)


class Refusal(StrEnum):
    """Why a put refused one entry (its value is the protocol's error code)."""

    MEMORY_FULL = "memory_full"  # a storage quota (`Quotas`) would be passed
    VECTOR_DIMS = "invalid_message"  # its vectors' dimension is not its space's


class StorageFull(ProtocolError):
    """The disk under the store is full: nothing of the write was stored (`memory_full` on
    the wire, `detail.reason` "disk_full"). Forgets still run (docs/durability.md, "A full
    disk"); writes resume by themselves once the disk has room again."""

    def __init__(self, message: str = "") -> None:
        super().__init__(ErrorCode.MEMORY_FULL, message or (
            "the disk under the store is full; nothing was stored. Forget entries or free"
            " disk space: writes resume once there is room"), detail={"reason": "disk_full"})


# Outcome of one entry of a put: None when stored, else why not.
StoreOutcome = Refusal | None


@dataclass(frozen=True, slots=True)
class Quotas:
    """Persisted-entry limits; a write beyond one is refused with `memory_full`.

    Entry counts limit new entries; byte limits (key, content and tag bytes, `stored_bytes`,
    as `usage.bytes` counts them) limit new entries and updates that grow. "Per agent" is per
    (namespace, writer).
    """

    max_entries_per_namespace: int = 1_000_000
    max_entries_per_agent: int = 100_000
    max_bytes_per_namespace: int = 1 << 30
    max_bytes_per_agent: int = 1 << 28
    evict: bool = False  # `limits.on_full` "evict": make room by evicting (docs/growth.md)


@functools.lru_cache(maxsize=4096)
def scope_token(namespace: str) -> str:
    """The FTS token that confines a keyword search to one namespace."""
    return "n" + hashlib.blake2b(namespace.encode(), digest_size=10).hexdigest()


@runtime_checkable
class EntryStore(Protocol):
    """What the memory plugin needs from a persistent backend. All methods are coroutines.

    Writes return only after their data is committed (durable). Reads never return expired
    entries (expires at updated_at + ttl when ttl > 0, as written by `put`; `touch` moves
    updated_at but never the expiry).

    `reads_on_loop` is True when reads run synchronously on the event loop and no method
    needs to run inside a task (no `asyncio.timeout`). The store has to say so: on Python
    3.11 (no eager tasks) the request core saves a task a request by running a handler's first
    step in the transport's callback, which only a store that needs no task allows (see
    `host.net.pipeline`); the server reads the flag, nothing else does.
    """

    reads_on_loop: bool

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

    def touch(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], when: float
    ) -> Awaitable[int]:
        """Record a read of the entries under `keys` in `tiers`: move their `updated_at` forward
        to `when`, for those visible to `scope`, live at `when` and last updated before it; the
        number moved. Returns after the commit, as `put` and `forget` do.

        Nothing else changes: content, tags, source, score, ttl, created_at, the keyword index,
        the vectors and the quota usage stay as they are, so a touch can never undo a write that
        landed between the read and the touch (a write-back of the entry read could). Expiry
        never moves either: a touch does not extend a TTL and cannot bring an expired entry
        back. The entry then expires before `updated_at + ttl`: a caller that shows entries with
        a TTL to wire clients (whose rule is `updated_at + ttl`) should not touch them.
        """

    async def collect_garbage(self, now: float) -> int:
        """Physically delete expired entries; the number deleted."""

    async def ready(self) -> bool:
        """True when the store answers a trivial query."""


@runtime_checkable
class StoreExtensions(Protocol):
    """Optional capability of an `EntryStore`: what the store extensions of the wire need
    beyond filters (docs/protocol.md, "Store extensions"). Both backends have it.

    Reads apply `q` (visibility, liveness, keys, tags, `where`, `key_prefix`) in the query."""

    def refresh(self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], now: float
                ) -> Awaitable[int]:
        """Restart the TTL of the live entries under `keys` with one: they expire `ttl`
        seconds after `now`. Returns after the commit: how many."""

    def sweep(self, scope: Scope, tiers: Sequence[str], now: float) -> Awaitable[int]:
        """Delete the expired entries of `scope`'s namespace it may see in `tiers`, 1,000 a
        transaction (each batch logged as one `expired` change; other writes may land between
        batches). Returns after the last commit: how many."""

    async def key_paths(self, scope: Scope, q: Query, field: str, prefix: Sequence[str],
                        now: float) -> list[bytes]:
        """The distinct JSON texts of the arrays under key member `field` among the entries
        `q` lets `scope` read, with `prefix`'s elements ("*": any) leading."""


@runtime_checkable
class ClientVectors(Protocol):
    """Optional capability of an `EntryStore`: it keeps client-supplied vectors (the store
    extension; SQLite has it). `put` writes a `NewEntry`'s `vectors` in its transaction and
    refuses rows of another dimension than their space's (`Refusal.VECTOR_DIMS`). Unit float32
    rows kept per (namespace, space), never returned."""

    async def client_vectors(self, scope: Scope, q: Query, space: str, now: float
                             ) -> tuple[int, list[tuple[int, np.ndarray]]]:
        """The dimension of the namespace's `space` (0: none yet) and (row id, its vectors
        as a (n, dims) array) of every entry `q` lets `scope` read with vectors in it."""

    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]:
        """As `VectorSearch.fetch`: the nearest rows read back."""


# entries with client vectors in one space: (their row ids, how many vectors each has, the
# vectors, (n, dims) float32 in entry order, the (tier, owner) of each, the expiry of each)
ClientRows: TypeAlias = (
    "tuple[list[int], list[int], np.ndarray, list[tuple[str, str]], list[float | None]]")


@runtime_checkable
class NearSearch(Protocol):
    """Optional capability of an `EntryStore` with BM25 (PostgreSQL): its keyword search also
    returns, in the same round trip, the neighbours of its first `near` candidates, {candidate
    id: [(neighbour, distance), ...]} as its `neighbours` would give them (`span` a side); the
    engine (`host.search.engine`) asks `neighbours` only for the hits not among those."""

    async def search_near(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, near: int,
        span: int,
    ) -> tuple[list[StoredEntry], dict[int, list[tuple[StoredEntry, int]]]]:
        """As `EntryStore.search`, with the neighbours of the first `near` candidates."""


@runtime_checkable
class ClientSpaceReads(Protocol):
    """Optional capability of a `ClientVectors` store: the host searches its client spaces in
    its own in-memory indexes (`host.search.client_vectors.ClientSpaces`; SQLite), loading a
    space on its first retrieve and catching up on the change log before each, and reads
    back through the store what the index found."""

    def client_space(self, namespace: str, space: str
                     ) -> tuple[int, int, Iterator[ClientRows]]:
        """(the namespace's newest change number, the space's dimension, its rows in
        batches), all of one snapshot (blocking: run it in a thread)."""

    async def client_changes(self, namespace: str, after: int, limit: int
                             ) -> tuple[int, list[int] | None]:
        """A page of what changed `namespace`'s client vectors after its change number
        `after`: (the change number read up to, the ids of the entry rows stored in the changes
        after `after` up to it). A page holds about `limit` rows and whole changes only (a
        single larger change comes whole); read again from the number returned until it comes
        back unchanged (no change after it: an empty list). The ids are None when the log was
        pruned past `after` (they cannot be told: read the space again). Deletes are not
        listed (the reader drops the rows it finds gone)."""

    async def client_rows_of(self, ids: Sequence[int], space: str, dims: int) -> ClientRows:
        """The entries among `ids` with vectors in `space` now, with them."""

    async def allowed_ids(self, scope: Scope, q: Query, now: float) -> np.ndarray:
        """As `VectorStore.allowed_ids`."""

    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]:
        """As `VectorSearch.fetch`."""


@runtime_checkable
class KeywordStats(Protocol):
    """Optional capability of an `EntryStore`: its keyword search is BM25 and it can score a
    text outside its index on the same scale (both backends have it; see `host.text.bm25`).
    Without it the search engine keeps the store's own relevance and fuses nothing."""

    async def keyword_stats(self, scope: Scope, text: str, q: Query | None = None,
                            now: float | None = None) -> Bm25Stats:
        """The BM25 statistics of `text`'s terms among the entries `q` lets `scope` read."""

    def analyse(self, text: str) -> Analysis:
        """`text`'s terms as the store's keyword index reads them."""


@runtime_checkable
class TierCounts(Protocol):
    """Optional capability of an `EntryStore`: it counts its live entries by tier (both
    backends; the `a2e_entries` gauge of `/metrics`, empty without it)."""

    async def count_by_tier(self, now: float) -> dict[str, int]:
        """Live entries at `now` by persistent tier (a scan: called every few seconds)."""


@runtime_checkable
class StoredVectors(Protocol):
    """Optional capability of an `EntryStore`: it reads back the stored vectors of entries by
    id (both backends; the judgement of a reply, `host.search.judgement`, compares them)."""

    async def vectors_of(self, ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        """The ids that have a stored vector of `dim` and their float32 unit rows, in no
        particular order."""


@runtime_checkable
class NotReadyReason(Protocol):
    """Optional capability of an `EntryStore`: it says why `ready()` is False (SQLite: a full
    disk), for `/readyz`; without it `/readyz` gives the server's answer alone."""

    def not_ready_reason(self) -> str:
        """Why the store is not ready ("" when it cannot say)."""


@runtime_checkable
class AdjustableQuotas(Protocol):
    """Optional capability of an `EntryStore`: its `Quotas` may be replaced while it runs (both
    backends; `Host.reload` applies new `limits` quotas through it, else at a restart)."""

    quotas: Quotas


# -- the value types of `VectorSearch` (also those of the search engine's own index) ---------


@dataclass(frozen=True, slots=True)
class Pending:
    """An entry whose vector is missing or stale: where it lives and the text to embed."""

    id: int
    namespace: str
    tier: str
    owner: str
    expires_at: float | None
    text: str


def digest(text: str) -> bytes:
    """The 8-byte digest of an embedded text, stored beside its vector."""
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


@dataclass(frozen=True, slots=True)
class Hits:
    """The result of a search: ids and similarities best first, and the background.

    `mean`/`std` describe the similarity of the query to every row that passed the filters
    (`allowed` rows), so `(similarity - mean) / std` says how far a hit stands out.
    """

    ids: np.ndarray
    similarities: np.ndarray
    mean: float
    std: float
    allowed: int
    also: dict[int, float] = field(default_factory=dict)  # similarities of ids asked besides


@runtime_checkable
class VectorQueue(Protocol):
    """Optional capability of an `EntryStore`: it queues its new and changed entries for an
    embedding (every store with vectors: `VectorStore`, `VectorSearch`)."""

    async def set_vector_model(self, name: str, dim: int) -> bool:
        """Record the embedder in the database; a different one than recorded drops every
        vector and queues every entry. True when that happened."""

    async def requeue_vectors(self) -> int:
        """Queue every entry for re-embedding; the queue's length."""

    async def vector_queue(self) -> int:
        """Entries waiting for a vector."""


@runtime_checkable
class VectorSearch(VectorQueue, Protocol):
    """Optional capability of an `EntryStore`: it keeps the vectors and searches them itself.

    A store with it (`PostgresEntryStore` with pgvector) is shared by several hosts, so no host
    can hold the vectors in memory: the search engine (`host.search.engine`) then writes every
    vector through `put_vectors` and asks `nearest_vectors` for the neighbours of a query, with
    the same visibility as every read (namespace, tier/owner, keys, tags, TTL) applied in the
    query BEFORE ranking. `vectors_available` is False when the capability is absent at run time
    (no pgvector on the server): the engine then searches by keywords alone. A store without
    this protocol (SQLite) is searched through the engine's in-memory index instead.
    """

    vectors_available: bool

    async def claim_vectors(self, limit: int, lease: float) -> list[tuple[Pending, int]]:
        """Claim up to `limit` queued entries for `lease` seconds (of the database's clock),
        oldest first, skipping those another host holds: each with the text to embed and its
        queue sequence number (for `put_vectors`)."""

    async def put_vectors(self, model: str, rows: Sequence[tuple[int, int, np.ndarray]]
                          ) -> list[int]:
        """Store `(entry id, sequence, unit vector)` rows under `model` and dequeue them; a row
        whose entry changed (sequence moved) or vanished since its claim is skipped. Returns
        the ids stored; returns after the commit."""

    async def nearest_vectors(
        self, scope: Scope, q: Query, model: str, vector: np.ndarray, now: float, k: int,
        sample: int, also: Sequence[int] = (),
    ) -> Hits:
        """The `k` entries `q` lets `scope` read nearest to `vector` (cosine), best first, and
        the mean/std of the similarity over at most `sample` of those entries; in `also`, the
        similarity of each of the ids `also` that has a vector (the query's keyword candidates,
        read in the same round trip)."""

    async def vector_similarity(self, model: str, vector: np.ndarray, ids: Sequence[int]
                                ) -> np.ndarray:
        """Cosine similarity of `vector` to the entries `ids`, NaN for those without a vector."""

    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]:
        """The entries among `ids` that `q` lets `scope` read, with `id` set; any order."""

    async def neighbours(self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]],
                         span: int, now: float) -> list[tuple[StoredEntry, int, int]]:
        """For each `(id, tier, owner)` of `hits`, the up to `span` entries written just before
        it and the up to `span` just after it in its own (namespace, tier, owner), in row-id
        order, that `q` lets `scope` read: `(entry with id set, hit id, distance)`, distance
        1 for the adjacent readable entry of that group; any order, a hit's own entry never."""


@runtime_checkable
class VectorStore(VectorQueue, Protocol):
    """Optional capability of an `EntryStore`: it keeps the vectors the search engine embeds
    and the engine searches them in its in-memory index (`host.search.vectors`; SQLite). The
    engine reads the queue (`pending_vectors`), writes vectors (`write_vectors`), loads them at
    start (`load_vectors`), drops those deletes removed (`vectors_gone`), and reads back by
    row id what the index found (`fetch`, `neighbours`, with `allowed_ids` for the filters).
    A store with neither this nor `VectorSearch` is searched by keywords alone."""

    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int
    ) -> list[StoredEntry]:
        """As `EntryStore.search`."""

    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]:
        """As `VectorSearch.fetch`."""

    async def neighbours(self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]],
                         span: int, now: float) -> list[tuple[StoredEntry, int, int]]:
        """As `VectorSearch.neighbours`."""

    async def allowed_ids(self, scope: Scope, q: Query, now: float) -> np.ndarray:
        """The row ids `q`'s keys and tags filters let `scope` read (the index's filter)."""

    async def pending_vectors(self, limit: int, namespace: str | None = None
                              ) -> list[tuple[Pending, bytes | None]]:
        """Up to `limit` queued entries (of `namespace`), newest first, each with the digest
        of the text its stored vector was made of (None: no vector)."""

    async def write_vectors(self, rows: Sequence[tuple[int, str, bytes | None]]) -> list[int]:
        """Store `(entry id, embedded text, vector bytes or None: unchanged)` rows and dequeue
        them, but a row whose entry's text changed since (it stays queued); the ids dequeued."""

    async def vectors_gone(self) -> list[int]:
        """Ids whose vectors deletes removed since the last `clear_vectors_gone`."""

    async def clear_vectors_gone(self, ids: Sequence[int]) -> None:
        """Acknowledge `vectors_gone` ids."""

    def load_vectors(self, dim: int) -> Iterator[tuple[list[Pending], np.ndarray]]:
        """Every stored vector, in batches (blocking: run it in a thread)."""


@runtime_checkable
class NamespaceVectors(Protocol):
    """Optional capability of a `VectorStore`: it reads the vectors of one namespace, so the
    engine's in-memory index loads a namespace on its first query (within
    `search.vector_memory_bytes`) instead of every vector at start (SQLite)."""

    path: str  # the database file: the indexes built from it are saved beside it

    def namespace_vectors(self, namespace: str, dim: int) -> Iterator[
            tuple[list[int], np.ndarray, list[tuple[str, str]], list[float | None]]]:
        """The stored vectors of `namespace` in batches: (entry ids, (n, dim) float32, the
        (tier, owner) of each, the expiry of each); blocking: run it in a thread."""


@runtime_checkable
class VectorCatchUp(Protocol):
    """Optional capability of a `VectorStore`: other processes write vectors into it too (a
    SQLite file a host, `a2e-host mcp` and the library share), and it tells which are new, so
    the worker's in-memory index takes them in before each batch."""

    def vector_seq(self) -> int:
        """The number of the newest write of vectors (blocking: read before `load_vectors`)."""

    async def vectors_since(self, after: int, dim: int, limit: int = 10_000
                            ) -> tuple[list[Pending], np.ndarray, int]:
        """Up to `limit` vectors written after number `after`, by any process: (rows, their
        vectors, the number read up to)."""


# -- the change log (`host.store.changes`: its records and the rules every backend keeps) ----


@dataclass(frozen=True, slots=True)
class Change:
    """One committed request's changes in one namespace."""

    seq: int
    op: str  # "stored", "forgotten", "expired" or "evicted"
    entries: bytes  # the JSON array of records (`host.store.changes.decode_entries`)


@runtime_checkable
class ChangeLog(Protocol):
    """Optional capability of an `EntryStore`: its writes keep a change log
    (`host.store.changes`), the source of `memory/watch` (both backends)."""

    async def change_head(self, namespace: str) -> int:
        """The sequence a watch of `namespace` starting now starts after (at least the floor)."""

    async def change_heads(self, namespaces: Sequence[str]) -> dict[str, int]:
        """`change_head` of several namespaces at once (the poll of changes other processes
        or hosts committed)."""

    async def change_floor(self, namespace: str) -> int:
        """The highest sequence pruned from `namespace`'s log (0: none)."""

    async def changes_after(self, namespace: str, after: int, limit: int,
                            max_bytes: int = 0) -> list[Change]:
        """Up to `limit` changes of `namespace` with `seq` > `after`, in order; with
        `max_bytes`, no more after the one that takes their `entries` to that many bytes."""

    async def prune_changes(self, before: float, max_rows: int) -> int:
        """Delete the changes committed before `before` (seconds since the epoch) and those
        past the newest `max_rows` of their namespace, raising the floors; the number deleted."""


@runtime_checkable
class ChangeNotices(Protocol):
    """Optional capability of a `ChangeLog` store: it tells at once of a change committed
    through any host (PostgreSQL's LISTEN/NOTIFY); the watches poll the log in any case."""

    async def listen_changes(self, notify: Callable[[str], None]) -> None:
        """From now on call `notify(namespace)` ("" = any) when a change commits."""


@dataclass(frozen=True, slots=True)
class NamespaceOverview:
    """One namespace at a glance (the memory browser's Namespaces page): live entries by tier
    and by writing agent, their content bytes, and the entries waiting for a vector."""

    namespace: str
    tiers: dict[str, int]
    agents: dict[str, dict[str, int]]  # agent -> tier -> live entries it last wrote
    bytes: int
    backlog: int


@dataclass(frozen=True, slots=True)
class BrowseFilter:
    """Filters of a browse, ANDed: `tiers` (persistent ones), the writing `agent` ("" = any),
    every one of `tags`, `key_text` within the key's JSON text ("" = any)."""

    tiers: tuple[str, ...] = PERSISTENT_TIERS
    agent: str = ""
    tags: tuple[str, ...] = ()
    key_text: str = ""
    limit: int = 25
    offset: int = 0


@dataclass(frozen=True, slots=True)
class BrowsedEntry:
    """One live entry as an operator sees it, every agent's alike. `vector` is "written",
    "queued" (waiting for the embedding worker) or "none"."""

    id: int
    tier: str
    owner: str
    agent: str
    key: bytes
    content: bytes
    tags: list[str]
    source: str
    score: float
    ttl: int
    created_at: float
    updated_at: float
    vector: str


@runtime_checkable
class Browse(Protocol):
    """Optional capability of an `EntryStore`: an operator's reads across the agents of a
    namespace (the memory browser, `host.ui`). Nothing here is reachable from the wire; the
    caller decides which namespaces and tiers a person may see."""

    async def overview(self, namespaces: Sequence[str] | None, now: float
                       ) -> list[NamespaceOverview]:
        """The namespaces with live entries (only those in `namespaces` unless None), by name."""

    async def browse(self, namespace: str, f: BrowseFilter, now: float
                     ) -> tuple[list[BrowsedEntry], int]:
        """Live entries of `namespace` matching `f`, newest first (updated_at, then id);
        (the page at `f.offset` of at most `f.limit`, how many match)."""

    async def browse_entry(self, namespace: str, id: int, now: float) -> BrowsedEntry | None:
        """The live entry with row id `id` in `namespace`, or None."""

    async def export_namespace(self, namespace: str, now: float, after: int = 0,
                               limit: int = 1000) -> list[BrowsedEntry]:
        """The live entries of `namespace` with a row id above `after`, in row order, at most
        `limit`: a page of the browser's export (written in the format of `a2e-host export`;
        the browser streams page after page, so a download holds one page in memory)."""


# -- the operator tasks of the CLI, the same on every backend --------------------------------


@dataclass(frozen=True, slots=True)
class NamespaceStats:
    """Live entries and their content bytes in one (namespace, tier)."""

    namespace: str
    tier: str
    entries: int
    bytes: int


@dataclass(frozen=True, slots=True)
class ExportRow:
    """One live entry as exported. `key` and `content` are JSON text, as stored."""

    namespace: str
    tier: str
    owner: str
    agent: str
    key: str
    content: str
    tags: str  # JSON array text
    source: str
    score: float
    ttl: int
    created_at: float
    updated_at: float


class StoreAdmin(Protocol):
    """The operator tasks of the CLI's `stats`, `export`, `import` and `gc` on one store, the
    same on every backend (`host.store.sqlite.admin.SQLiteAdmin`,
    `host.store.postgres.admin.PostgresAdmin`; `host.cli._store.open_admin` picks one), so a
    command never branches on the backend. Backup and vacuum are SQLite's alone."""

    where: str  # the database as shown to the operator: the file, or the URL, password masked

    async def stats(self, now: float) -> list[NamespaceStats]:
        """Live entries and content bytes by namespace and tier, by namespace then tier."""

    async def database_bytes(self) -> int:
        """What the store takes on disk."""

    async def embed_backlog(self) -> int:
        """Entries waiting for a vector (the embedding queue)."""

    async def collect_garbage(self, now: float) -> int:
        """Delete every entry expired at `now`; how many."""

    def export_rows(
        self, now: float, namespace: str | None = None
    ) -> AbstractAsyncContextManager[tuple[int, AsyncIterator[ExportRow]]]:
        """`async with admin.export_rows(now) as (total, rows)`: how many live entries (of one
        namespace if given) and an async iterator of them in id order, one snapshot."""

    async def import_batch(
        self, batch: Sequence[tuple[Scope, NewEntry]], now: float
    ) -> list[StoreOutcome]:
        """Upsert `batch` keeping each entry's timestamps; one outcome per entry, in order."""
