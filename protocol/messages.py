"""Every message of the A2E memory capability as a msgspec Struct.

All messages share the envelope `type`, `id`, `version`, `ts`; `type` is the tag of one tagged
union (`Message`). `version` is required on the wire; `id` and `ts` may be omitted. Unknown
fields are ignored. Constraints (score in [0, 1], ttl >= 0, limit >= 1, tier one of three) are
declared in the types, so a decode that succeeds is a valid message.

A store request carries its entries as raw JSON (`msgspec.Raw`) so that one malformed entry can
be reported without failing the others: decode each with `protocol.codec.decode_entry`.
Reply entries are `EntryOut`; the reply structs declare them as plain dicts so a client decodes
them as such.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from protocol.validity import MAX_TEXT

__all__ = [
    "VERSION",
    "MAX_EXACT",
    "Tier",
    "TIERS",
    "MemoryEntry",
    "EntryOut",
    "Collapsed",
    "Envelope",
    "MemoryInitRequest",
    "MemoryInitResponse",
    "MemoryStoreRequest",
    "MemoryStoreResponse",
    "MemoryRetrieveRequest",
    "MemoryRetrieveResponse",
    "MemoryForgetRequest",
    "MemoryForgetResponse",
    "MemoryWatchRequest",
    "MemoryWatchResponse",
    "MemoryChangedEvent",
    "MemoryWatchEndedEvent",
    "MemoryUnwatchRequest",
    "MemoryUnwatchResponse",
    "MemoryPathsRequest",
    "MemoryPathsResponse",
    "MemorySweepRequest",
    "MemorySweepResponse",
    "MemoryHistoryRequest",
    "MemoryHistoryResponse",
    "Consolidated",
    "CONSOLIDATE_POLICIES",
    "MemoryUsageRequest",
    "MemoryUsageResponse",
    "QuotaUse",
    "CHANGE_OPS",
    "WATCH_END_REASONS",
    "HandshakeRequest",
    "HandshakeResponse",
    "Ping",
    "Shutdown",
    "Pong",
    "Error",
    "Message",
    "Request",
    "REQUEST_TYPES",
]

VERSION = "1.0"

Tier = Literal["working", "episodic", "semantic"]
TIERS: tuple[str, ...] = ("working", "episodic", "semantic")
TierOrAll = Literal["", "working", "episodic", "semantic"]
Score = Annotated[float, Meta(ge=0.0, le=1.0)]
# the largest integer every JSON reader holds exactly (a double's 53 bits): the bound of each
# integer field, so that none is beyond a double or SQLite's INTEGER (docs/protocol.md, "Numbers")
MAX_EXACT = 2**53 - 1
Ttl = Annotated[int, Meta(ge=0, le=MAX_EXACT)]  # seconds (~285 million years)
Limit = Annotated[int, Meta(ge=1, le=MAX_EXACT)]  # the host clamps it to `limits.max_limit`
Offset = Annotated[int, Meta(ge=0, le=MAX_EXACT)]  # the host bounds it further (docs/protocol.md)
Depth = Annotated[int, Meta(ge=0, le=MAX_EXACT)]
# an instant of the time extension (docs/protocol.md, "Time of a fact"): epoch seconds or
# ISO-8601 text with a zone, read by `protocol.validity.instant`
Instant = float | Annotated[str, Meta(max_length=MAX_TEXT)] | None


class MemoryEntry(Struct, kw_only=True):
    """One entry of a store request. Timestamps sent by a client are read but ignored."""

    key: dict[str, Any]
    content: Raw
    tier: Tier
    tags: list[str] = []
    source: str = ""
    score: Score = 1.0
    ttl: Ttl = 0
    created_at: float | None = None
    updated_at: float | None = None
    # the client-vector extension (docs/protocol.md, "Store extensions"): vectors the client
    # computed, kept in the namespace's space `vector_space`, never returned
    vectors: list[list[float]] = []
    vector_space: str = ""
    # the time extension (docs/protocol.md, "Time of a fact"): when the fact holds, [from, until)
    valid_from: Instant = None
    valid_until: Instant = None


class EntryOut(Struct, kw_only=True):
    """One entry in a retrieve reply; `relevance`/`combined` only when the request had a query."""

    key: Raw
    content: Raw
    tier: str
    tags: list[str]
    source: str
    score: float
    ttl: int
    created_at: float
    updated_at: float
    relevance: float | UnsetType = UNSET
    combined: float | UnsetType = UNSET
    # the judgement extension (docs/protocol.md, "Judgement"): in a query's reply, the keys of
    # the older entries this one supersedes, and the near-duplicates it stands for
    supersedes: list[Raw] | UnsetType = UNSET
    collapsed: Collapsed | UnsetType = UNSET
    # the time extension: the entry's validity as epoch seconds, each only when it has one
    valid_from: float | UnsetType = UNSET
    valid_until: float | UnsetType = UNSET


class Collapsed(Struct, kw_only=True):
    """The near-duplicates a reply's entry stands for: how many, and their keys."""

    count: int
    keys: list[Raw]


class Envelope(Struct, kw_only=True, tag_field="type"):
    """Fields every message carries. `version` is required; `id`/`ts` default when omitted."""

    version: str
    id: str = ""
    ts: float = 0.0


class MemoryInitRequest(Envelope, tag="memory/init/req"):
    namespace: str
    scope: dict[str, Any] = {}
    metadata: dict[str, Any] = {}


class MemoryInitResponse(Envelope, tag="memory/init/resp"):
    memory_id: str
    namespace: str
    req_id: str = ""
    success: bool = True


# consolidation on write (docs/protocol.md, "Consolidation on write"): "" is the namespace's
# configured policy (`keep` unless configured: every entry stored)
CONSOLIDATE_POLICIES: tuple[str, ...] = ("", "keep", "skip", "supersede")


class MemoryStoreRequest(Envelope, tag="memory/store/req"):
    memory_id: str
    entries: list[Raw] = []
    consolidate: Literal["", "keep", "skip", "supersede"] = ""


class Consolidated(Struct, kw_only=True):
    """What consolidation on write did with one entry of a store: `skipped` (not stored: a
    near-duplicate is) or `superseded` (stored; the older entry `existing` retired, kept in
    history), with the similarity that decided."""

    key: Raw
    action: str
    existing: Raw
    similarity: float


class MemoryStoreResponse(Envelope, tag="memory/store/resp"):
    req_id: str = ""
    stored: list[Any] = []
    errors: list[str] = []
    # an extension (docs/protocol.md): entries the host evicted to make room, sent when > 0
    evicted: int | UnsetType = UNSET
    # consolidation on write (docs/protocol.md): what it did, one item (`Consolidated`) an
    # entry it merged
    consolidated: list[dict[str, Any]] | UnsetType = UNSET


class MemoryRetrieveRequest(Envelope, tag="memory/retrieve/req"):
    memory_id: str
    keys: list[dict[str, Any]] = []
    query: str = ""
    tags: list[str] = []
    tier: TierOrAll = ""
    limit: Limit = 10
    min_score: Score = 0.0
    # extensions (docs/protocol.md, "Store extensions"), all applied before `limit`
    filter: dict[str, Any] = {}
    key_prefix: dict[str, list[str]] = {}
    offset: Offset = 0
    vector: list[float] = []
    vector_space: str = ""
    refresh_ttl: bool = False
    # the judgement extension (docs/protocol.md, "Judgement") of a query: an update ranks
    # above what it supersedes; near-duplicates collapse into one entry (asked for)
    supersede: bool = True
    collapse: bool = False
    # the time extension (docs/protocol.md, "Time of a fact"): only the entries valid then
    as_of: Instant = None


class MemoryRetrieveResponse(Envelope, tag="memory/retrieve/resp"):
    req_id: str = ""
    entries: list[dict[str, Any]] = []
    total: int = 0


class MemoryForgetRequest(Envelope, tag="memory/forget/req"):
    memory_id: str
    keys: list[dict[str, Any]] = []
    tags: list[str] = []
    tier: TierOrAll = "episodic"


class MemoryForgetResponse(Envelope, tag="memory/forget/resp"):
    req_id: str = ""
    deleted: int = 0


# -- the watch extension (docs/protocol.md, "Change streams"): not part of the A2E spec --------

CHANGE_OPS: tuple[str, ...] = ("stored", "forgotten", "expired", "evicted", "consolidated")
WATCH_END_REASONS: tuple[str, ...] = ("lagging", "retention", "unauthorized", "shutdown")


class MemoryWatchRequest(Envelope, tag="memory/watch/req"):
    """Follow the changes a retrieve of the session could read: `tier` "" = every readable
    tier; `tags` (all of them) and `keys` narrow it; `since` a cursor of an earlier event
    ("" = from now on)."""

    memory_id: str
    tier: TierOrAll = ""
    tags: list[str] = []
    keys: list[dict[str, Any]] = []
    since: str = ""


class MemoryWatchResponse(Envelope, tag="memory/watch/resp"):
    """The watch is on: its events follow, each after `cursor` (the position it starts after)."""

    req_id: str = ""
    watch_id: str = ""
    cursor: str = ""


class MemoryChangedEvent(Envelope, tag="memory/changed/event"):
    """One committed request's changes that the watch may see: `op` one of `CHANGE_OPS`;
    `entries` as a retrieve returns them for `stored`, key, tier and tags for the others."""

    watch_id: str = ""
    cursor: str = ""
    op: str = "stored"
    entries: list[dict[str, Any]] = []


class MemoryWatchEndedEvent(Envelope, tag="memory/watch/ended/event"):
    """The host ended a watch (`reason` one of `WATCH_END_REASONS`); `cursor` is the last one
    it delivered: watch again with `since` = `cursor` to go on losing nothing."""

    watch_id: str = ""
    cursor: str = ""
    reason: str = ""
    message: str = ""


class MemoryUnwatchRequest(Envelope, tag="memory/unwatch/req"):
    memory_id: str
    watch_id: str


class MemoryUnwatchResponse(Envelope, tag="memory/unwatch/resp"):
    req_id: str = ""


# -- the store extensions (docs/protocol.md, "Store extensions"): not part of the A2E spec ----


class MemoryPathsRequest(Envelope, tag="memory/paths/req"):
    """The distinct values of the key field `field` (arrays of strings) among the entries the
    session may read: those starting with `prefix` and ending with `suffix` (`"*"` matches any
    one element), cut to `max_depth` elements (0: whole), sorted, `limit` from `offset`."""

    memory_id: str
    field: str = "ns"
    tier: TierOrAll = ""
    prefix: list[str] = []
    suffix: list[str] = []
    max_depth: Depth = 0
    limit: Limit = 100
    offset: Offset = 0


class MemoryPathsResponse(Envelope, tag="memory/paths/resp"):
    req_id: str = ""
    paths: list[list[str]] = []


class MemorySweepRequest(Envelope, tag="memory/sweep/req"):
    """Delete now the expired entries of the session's namespace it may forget in `tier`."""

    memory_id: str
    tier: TierOrAll = ""


class MemorySweepResponse(Envelope, tag="memory/sweep/resp"):
    req_id: str = ""
    deleted: int = 0


# -- the usage extension (docs/protocol.md, "Usage") ---------------------------------------------


class MemoryUsageRequest(Envelope, tag="memory/usage/req"):
    """How much of its quotas the session's agent and namespace hold (and its working tier)."""

    memory_id: str


class QuotaUse(Struct, kw_only=True):
    """What a tenant holds against its quotas: entries and bytes (key, content and tags)."""

    entries: int = 0
    bytes: int = 0
    max_entries: int = 0
    max_bytes: int = 0


class MemoryUsageResponse(Envelope, tag="memory/usage/resp"):
    req_id: str = ""
    namespace: QuotaUse = msgspec.field(default_factory=QuotaUse)
    agent: QuotaUse = msgspec.field(default_factory=QuotaUse)
    working: QuotaUse = msgspec.field(default_factory=QuotaUse)
    on_full: str = "refuse"


# -- the history extension (docs/protocol.md, "History") ----------------------------------------


class MemoryHistoryRequest(Envelope, tag="memory/history/req"):
    """The versions of the entry at `key` the session may read in `tier` ("" = every
    persistent tier it may read), newest first, at most `limit`: the current one, then the
    earlier ones the host keeps, each with when and why it was replaced."""

    memory_id: str
    key: dict[str, Any]
    tier: TierOrAll = ""
    limit: Limit = 10


class MemoryHistoryResponse(Envelope, tag="memory/history/resp"):
    req_id: str = ""
    versions: list[dict[str, Any]] = []


class HandshakeRequest(Envelope, tag="handshake/req"):
    agent_id: str = ""
    agent_caps: list[str] = []
    auth_token: str = ""


class HandshakeResponse(Envelope, tag="handshake/resp"):
    req_id: str = ""
    session_id: str = ""
    accepted_caps: list[dict[str, Any]] = []
    max_parallel: int = 1
    ok: bool = True
    reason: str = ""


class Ping(Envelope, tag="ping"):
    pass


class Shutdown(Envelope, tag="shutdown"):
    """The A2E SDK's graceful teardown (agent -> host, no reply): the host answers what it
    read before it, then ends the connection or session. `timeout` is the SDK's; the host
    bounds in-flight requests by its own `limits.request_timeout`."""

    timeout: float = 10.0


class Pong(Envelope, tag="pong"):
    req_id: str = ""
    uptime_seconds: float = 0.0


class Error(Envelope, tag="error"):
    req_id: str = ""
    code: str = "internal_error"
    message: str = ""
    detail: dict[str, Any] = {}
    retryable: bool = False
    capability_name: str = "memory"


Request = (
    MemoryInitRequest
    | MemoryStoreRequest
    | MemoryRetrieveRequest
    | MemoryForgetRequest
    | MemoryWatchRequest
    | MemoryUnwatchRequest
    | MemoryPathsRequest
    | MemorySweepRequest
    | MemoryHistoryRequest
    | MemoryUsageRequest
    | HandshakeRequest
    | Ping
    | Shutdown
)

Message = (
    Request
    | MemoryInitResponse
    | MemoryStoreResponse
    | MemoryRetrieveResponse
    | MemoryForgetResponse
    | MemoryWatchResponse
    | MemoryUnwatchResponse
    | MemoryPathsResponse
    | MemorySweepResponse
    | MemoryHistoryResponse
    | MemoryUsageResponse
    | MemoryChangedEvent
    | MemoryWatchEndedEvent
    | HandshakeResponse
    | Pong
    | Error
)

REQUEST_TYPES: frozenset[str] = frozenset(
    msgspec.inspect.type_info(t).tag  # type: ignore[attr-defined]
    for t in (
        MemoryInitRequest,
        MemoryStoreRequest,
        MemoryRetrieveRequest,
        MemoryForgetRequest,
        MemoryWatchRequest,
        MemoryUnwatchRequest,
        MemoryPathsRequest,
        MemorySweepRequest,
        MemoryHistoryRequest,
        MemoryUsageRequest,
        HandshakeRequest,
        Ping,
        Shutdown,
    )
)
