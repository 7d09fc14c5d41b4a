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

__all__ = [
    "VERSION",
    "Tier",
    "TIERS",
    "MemoryEntry",
    "EntryOut",
    "Envelope",
    "MemoryInitRequest",
    "MemoryInitResponse",
    "MemoryStoreRequest",
    "MemoryStoreResponse",
    "MemoryRetrieveRequest",
    "MemoryRetrieveResponse",
    "MemoryForgetRequest",
    "MemoryForgetResponse",
    "HandshakeRequest",
    "HandshakeResponse",
    "Ping",
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
Ttl = Annotated[int, Meta(ge=0, le=2**53 - 1)]  # seconds; the bound keeps it an exact JSON
# number everywhere and within SQLite's INTEGER (~285 million years)
Limit = Annotated[int, Meta(ge=1)]


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


class MemoryStoreRequest(Envelope, tag="memory/store/req"):
    memory_id: str
    entries: list[Raw] = []


class MemoryStoreResponse(Envelope, tag="memory/store/resp"):
    req_id: str = ""
    stored: list[Any] = []
    errors: list[str] = []


class MemoryRetrieveRequest(Envelope, tag="memory/retrieve/req"):
    memory_id: str
    keys: list[dict[str, Any]] = []
    query: str = ""
    tags: list[str] = []
    tier: TierOrAll = ""
    limit: Limit = 10
    min_score: Score = 0.0


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
    | HandshakeRequest
    | Ping
)

Message = (
    Request
    | MemoryInitResponse
    | MemoryStoreResponse
    | MemoryRetrieveResponse
    | MemoryForgetResponse
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
        HandshakeRequest,
        Ping,
    )
)
