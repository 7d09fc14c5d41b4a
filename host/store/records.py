"""The values the store interface (`host.store.interface`) takes and gives, the same on every
backend: who asks (`Scope`), what is written (`NewEntry`) and read back (`StoredEntry`), a read's
filters (`Query`), a put's outcomes (`Refusal`, `StorageFull`), the quotas, the embedding queue's
rows (`Pending`) and a vector search's answer (`Hits`), a change of the change log (`Change`) and
the memory browser's rows.

Entries are addressed by (namespace, tier, owner, canonical key): `owner` is the agent for the
episodic tier and "" for the semantic tier (`owner_for`). Keys and contents travel as JSON bytes:
the key in RFC 8785 canonical form (`protocol.keys.canonical_key`), the content exactly as the
client sent it.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, TypeAlias

from host.store.filters import Condition, KeyPrefix
from protocol.errors import ErrorCode, ProtocolError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "BrowseFilter",
    "BrowsedEntry",
    "Change",
    "ClientRows",
    "Hits",
    "NamespaceOverview",
    "NewEntry",
    "PERSISTENT_TIERS",
    "Pending",
    "Query",
    "Quotas",
    "Refusal",
    "Scope",
    "StorageFull",
    "StoreOutcome",
    "StoredEntry",
    "digest",
    "owner_for",
    "scope_token",
    "stored_bytes",
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
    # when the fact holds (the time extension, `protocol.validity`): [valid_from,
    # valid_until) in epoch seconds, None open on that side; a put replaces both
    valid_from: float | None = None
    valid_until: float | None = None


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
    valid_from: float | None = None  # when the fact holds (`NewEntry`), None: open
    valid_until: float | None = None


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
    # the time extension: only entries valid at `as_of` (epoch seconds; None: any, the
    # validity of an entry is then not looked at)
    as_of: float | None = None

    @property
    def narrowed(self) -> bool:
        """True when the read is narrowed by anything beyond its tiers."""
        return bool(self.keys or self.tags or self.where or self.key_prefix
                    or self.as_of is not None)


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
    # `ranking.importance_half_life`: eviction's value fades with it (0: the stored score)
    importance_half_life: float = 0.0


@functools.lru_cache(maxsize=4096)
def scope_token(namespace: str) -> str:
    """The FTS token that confines a keyword search to one namespace."""
    return "n" + hashlib.blake2b(namespace.encode(), digest_size=10).hexdigest()


# entries with client vectors in one space: (their row ids, how many vectors each has, the
# vectors, (n, dims) float32 in entry order, the (tier, owner) of each, the expiry of each)
ClientRows: TypeAlias = (
    "tuple[list[int], list[int], np.ndarray, list[tuple[str, str]], list[float | None]]")


# -- the embedding queue and a vector search (the store's and the engine's own index) -------


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


# -- the change log (`host.store.changes`: its records and the rules every backend keeps) ----


@dataclass(frozen=True, slots=True)
class Change:
    """One committed request's changes in one namespace."""

    seq: int
    op: str  # "stored", "forgotten", "expired" or "evicted"
    entries: bytes  # the JSON array of records (`host.store.changes.decode_entries`)


# -- the memory browser (`EntryStore.overview`, `browse`, ...) -------------------------------


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
    every one of `tags`, `key_text` within the key's JSON text ("" = any), the entries valid
    at `as_of` (epoch seconds, the rule of a read's `Query.as_of`; None: any)."""

    tiers: tuple[str, ...] = PERSISTENT_TIERS
    agent: str = ""
    tags: tuple[str, ...] = ()
    key_text: str = ""
    limit: int = 25
    offset: int = 0
    as_of: float | None = None


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
    valid_from: float | None = None  # when the fact holds (`NewEntry`), None: open
    valid_until: float | None = None
