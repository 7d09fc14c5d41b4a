"""The configuration's sections but search: one pydantic model each, every default and limit.

Each setting has a default here (or in `host/config/search.py`) and only here; other modules
read the values from a `Config` instance (`host/config/loading.py`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_RIGHTS",
    "MIB",
    "RIGHTS",
    "AuthConfig",
    "GcConfig",
    "LibraryConfig",
    "LimitsConfig",
    "LogConfig",
    "McpConfig",
    "RankingConfig",
    "Right",
    "RulesConfig",
    "ServerConfig",
    "StoreConfig",
    "TokenConfig",
    "UiConfig",
    "WatchConfig",
]

MIB = 1024 * 1024


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ServerConfig(_Section):
    """Where and how the WebSocket server listens."""

    host: str = Field("127.0.0.1", description="Address to bind.")
    port: int = Field(8765, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    transport: Literal["websockets", "picows"] = Field(
        "websockets",
        description="WebSocket library: `websockets` (pure Python framing) or `picows`"
        " (Cython, the `picows` extra; 10-20 % less CPU on a key read; no compression).",
    )
    compression: bool = Field(
        False, description="Negotiate permessage-deflate (costs ~35% CPU on small frames;"
        " `websockets` transport only)."
    )
    drain_timeout: float = Field(
        10.0, ge=0, description="Seconds a shutdown takes at most: in-flight requests finish"
        " within it, then every connection is closed (one that does not read is dropped)."
    )
    session_idle_timeout: float = Field(
        60.0, gt=0, description="HTTP + SSE: seconds a session with no stream open and no send"
        " lives; then it ends and its working tier is gone, as on a WebSocket disconnect."
    )
    unbound_session_timeout: float = Field(
        10.0, gt=0, description="HTTP + SSE with authentication on: seconds a session opened"
        " without a valid token lives unless a token binds it (an `Authorization` header or the"
        " handshake's `auth_token`)."
    )
    tls_cert: str = Field("", description="PEM certificate chain; with `tls_key`, serve wss://.")
    tls_key: str = Field("", description="PEM private key of `tls_cert`.")
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Browser Origins (`https://app.example`) allowed on the WebSocket and"
        " HTTP + SSE endpoints; `\"*\"`: any. Empty: none with authentication off, any with it"
        " on. Requests without an Origin header (non-browser agents) always pass.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="With authentication off: host names a request's `Host` header may carry"
        " besides loopback names, IP addresses and `server.host` (`\"*\"`: any); others get"
        " HTTP 403 (DNS rebinding).",
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("server.tls_cert and server.tls_key go together")
        if self.compression and self.transport == "picows":
            raise ValueError("server.compression needs server.transport = \"websockets\"")
        return self


class StoreConfig(_Section):
    """The persistent store for the episodic and semantic tiers."""

    db: str = Field(
        "./a2e-host.db",
        description="SQLite file path, or a postgresql:// URL to share one database among hosts.",
    )
    batch_max: int = Field(
        512, ge=1, description="Most write operations one group commit gathers."
    )
    pool_size: int = Field(
        10, ge=1, description="PostgreSQL: most connections in each host's pool."
    )
    disk_reserve_bytes: int = Field(
        16 * MIB, ge=0, description="SQLite: bytes kept free beside the database"
        " (`<db>-reserve`) so forgets run when the disk is full; 0: none (docs/durability.md).",
    )


class LimitsConfig(_Section):
    """Size and count limits; over a quota of persisted entries a store answers `memory_full`,
    or first evicts the storing agent's entries worth least (`on_full`, docs/growth.md)."""

    max_frame_bytes: int = Field(1 * MIB, ge=1024, description="Largest text frame accepted.")
    max_entry_bytes: int = Field(
        64 * 1024, ge=1, description="Largest encoded `content` of one entry."
    )
    max_entries_per_request: int = Field(1000, ge=1, description="Entries in one store request.")
    max_limit: int = Field(1000, ge=1, description="`limit` above this is clamped to it.")
    max_entries_per_namespace: int = Field(
        1_000_000, ge=1, description="Persisted entries in one namespace."
    )
    max_entries_per_agent: int = Field(
        100_000, ge=1, description="Persisted entries written by one agent in a namespace."
    )
    max_working_entries: int = Field(
        10_000, ge=1, description="Working-tier entries in one session."
    )
    max_sessions_per_connection: int = Field(
        64, ge=1, description="Memory sessions one connection may open."
    )
    max_pipelined: int = Field(
        1024, ge=1, description="Requests one connection may have read and not yet answered;"
        " beyond it the host reads no more of its frames until replies go out (backpressure on a"
        " client that does not read its replies)."
    )
    max_unsent_bytes: int = Field(
        16 * MIB, ge=1, description="Encoded replies and events one connection may have waiting"
        " to be sent; beyond it the host reads no more of its frames until the client reads, and"
        " a watch event that would pass it ends its watch (reason `lagging`)."
    )
    max_request_bytes_in_flight: int = Field(
        16 * MIB, ge=1024, description="Bytes of requests one connection may have sent and not"
        " yet had answered (pipelined); beyond it the host reads no more of its frames until"
        " replies go out. One frame is always taken up, whatever its size."
    )
    max_keys_per_request: int = Field(
        1000, ge=1, description="Keys in one retrieve or forget; more is `invalid_message`"
        " (the cost bound of one request)."
    )
    max_working_bytes: int = Field(
        64 * MIB, ge=1, description="Working-tier key, content and tag bytes one connection may hold, all its"
        " sessions together."
    )
    max_bytes_per_namespace: int = Field(
        1024 * MIB, ge=1, description="Persisted key, content and tag bytes in one namespace."
    )
    max_bytes_per_agent: int = Field(
        256 * MIB, ge=1, description="Persisted key, content and tag bytes written by one agent in a namespace."
    )
    on_full: Literal["refuse", "evict"] = Field(
        "refuse", description="What a store that would pass one of the four persisted quotas"
        " above does once the namespace's expired entries are collected: `refuse` answers"
        " `memory_full`; `evict` first removes as few as needed of the storing agent's own"
        " entries in the namespace, worth least first (lowest `score`, then longest since"
        " written or read), each logged as an `evicted` change (docs/growth.md)."
    )
    max_connections: int = Field(
        10_000, ge=1, description="Open TCP connections (counted from the accept, before any"
        " upgrade) and, apart, HTTP + SSE sessions; more are refused with HTTP 503."
    )
    max_connections_per_ip: int = Field(
        1_000, ge=1, description="Open TCP connections from one IP, counted from the accept"
        " (half-open upgrades count); more are refused with HTTP 429."
    )
    max_unbound_sessions_per_ip: int = Field(
        16, ge=1, description="HTTP + SSE with authentication on: open sessions from one IP not"
        " yet bound by a valid token; more are refused with HTTP 429 (HTTP + SSE sessions from"
        " one IP are also capped at `max_connections_per_ip`)."
    )
    max_replay_bytes: int = Field(
        1 * MIB, ge=0, description="HTTP + SSE: bytes of events a session keeps after a stream"
        " sent them, for a reconnect with `Last-Event-ID` to get them again; the oldest go first."
    )
    requests_per_second: float = Field(
        5_000.0, ge=0, description="Sustained frames a second on one connection (0: no limit);"
        " beyond it a frame is answered `rate_limited`."
    )
    request_burst: int = Field(
        10_000, ge=1, description="Frames one connection may send at once above the rate."
    )
    request_timeout: float = Field(
        30.0, gt=0, description="Seconds a request may take before it is answered"
        " `internal_error` (retryable)."
    )


class RankingConfig(_Section):
    """Weights of the combined score: relevance, importance (`score`), recency."""

    relevance_weight: float = Field(0.7, ge=0, description="Weight of query relevance.")
    importance_weight: float = Field(0.2, ge=0, description="Weight of the stored `score`.")
    recency_weight: float = Field(0.1, ge=0, description="Weight of recency.")
    recency_half_life: float = Field(
        7 * 24 * 3600.0, gt=0, description="Seconds after which recency counts half."
    )
    importance_half_life: float = Field(
        0.0, ge=0, description="Seconds after which an entry's importance (its `score`) counts"
        " half in ranking and in eviction, from its last write or read over the wire; 0: it"
        " never fades. The `score` a reply carries stays the stored one.",
    )
    search_candidates: int = Field(
        500, ge=1, description="Most keyword candidates ranked for one query and tier."
    )


Right = Literal["read_semantic", "write_semantic", "forget", "admin"]
RIGHTS: tuple[str, ...] = ("read_semantic", "write_semantic", "forget", "admin")
DEFAULT_RIGHTS: tuple[Right, ...] = ("read_semantic", "write_semantic", "forget")


class TokenConfig(_Section):
    """One bearer token: only its SHA-256 is kept. `a2e-host token new` prints these lines."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Hex SHA-256 of the token.")
    agent: str = Field(min_length=1, description="The agent identity the token proves.")
    namespaces: list[str] = Field(
        min_length=1, description='Namespaces the token may open; "*" stands for every one.'
    )
    rights: list[Right] = Field(
        default_factory=lambda: list(DEFAULT_RIGHTS),
        description="Beyond its own working and episodic memory: read_semantic, write_semantic,"
        " forget (persisted entries), admin (all of them).",
    )


class AuthConfig(_Section):
    """Authentication: on when `tokens` is not empty."""

    tokens: list[TokenConfig] = Field(
        default_factory=list,
        description="The accepted tokens: [[auth.tokens]] tables of sha256, agent, namespaces,"
        " rights, as `a2e-host token new` prints them (see docs/security.md).",
    )
    allow_anonymous_remote: bool = Field(
        False, description="Serve without tokens on a non-loopback address (else refuse to start)."
    )

    @model_validator(mode="after")
    def _unique(self) -> AuthConfig:
        hashes = [t.sha256 for t in self.tokens]
        if len(set(hashes)) != len(hashes):
            raise ValueError("auth.tokens: the same sha256 is listed twice")
        return self


class GcConfig(_Section):
    """The TTL garbage collector."""

    interval: float = Field(30.0, gt=0, description="Seconds between collections.")


class RulesConfig(_Section):
    """The `.cursorrules` subsystem (docs/rules.md): how loaded rules are stored.

    The stored `score` of a rule follows its level, so a retrieve by tag without a query lists
    the more specific rules first.
    """

    file_specific_score: float = Field(
        1.0, ge=0, le=1, description="Stored score of file-specific rules."
    )
    module_score: float = Field(0.9, ge=0, le=1, description="Stored score of module rules.")
    cross_module_score: float = Field(
        0.8, ge=0, le=1, description="Stored score of cross-module rules."
    )
    general_score: float = Field(0.7, ge=0, le=1, description="Stored score of general rules.")
    agent: str = Field(
        "a2e-host-rules", min_length=1, description="The agent recorded as writer of loaded rules."
    )


class LogConfig(_Section):
    """The daemon's log: one JSON object a line on stderr (plain text on a terminal).

    Entry content never goes to the log. Each request is logged at DEBUG; at INFO only a
    sampled fraction of requests is, so the hot path does not write a line per request.
    """

    level: str = Field(
        "INFO", pattern=r"(?i)^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$",
        description="DEBUG, INFO, WARNING, ERROR or CRITICAL.",
    )
    format: str = Field(
        "auto", pattern=r"^(auto|json|text)$",
        description="json, text, or auto (text on a terminal, else json).",
    )
    request_sample: float = Field(
        0.0, ge=0, le=1, description="Fraction of requests also logged at INFO (0 = none)."
    )


class LibraryConfig(_Section):
    """Defaults of the embeddable library's stores (`host.library`)."""

    json_flush_delay: float = Field(
        0.02, ge=0, description="Seconds a JSON file store's writer waits to gather a burst."
    )
    json_retry_delay: float = Field(
        1.0, gt=0, description="Seconds before a JSON file store retries a failed write."
    )
    json_lock_timeout: float = Field(
        10.0, gt=0, description="Seconds a JSON file store waits for another process's lock."
    )


class McpConfig(_Section):
    """The MCP server (`a2e-host mcp`, docs/mcp.md): whose memory its tools read and write.

    Every tool call acts as `agent` in `namespace`, as a WebSocket session opened with
    `memory/init` on that namespace and `scope.agent` would.
    """

    namespace: str = Field("default", min_length=1, description="Namespace the tools act in.")
    agent: str = Field(
        "default", min_length=1, description="Agent identity (owner of episodic memories)."
    )
    transport: Literal["stdio", "http"] = Field(
        "stdio", description="stdio (one client, the parent process) or http (streamable HTTP)."
    )
    host: str = Field("127.0.0.1", description="Address the HTTP transport binds.")
    port: int = Field(8766, ge=0, le=65535, description="HTTP port; 0 picks a free one.")
    path: str = Field("/mcp", pattern=r"^/", description="URL path of the HTTP endpoint.")
    max_k: int = Field(50, ge=1, description="Largest `k` that `memory_search` accepts.")


class UiConfig(_Section):
    """The memory browser at `GET /ui` on the host's port (docs/ui.md).

    With authentication on, only a token with the `admin` right signs in; with it off, the
    pages are served to loopback clients only.
    """

    enabled: bool = Field(True, description="Serve the memory browser at `/ui`.")
    page_size: int = Field(25, ge=1, le=500, description="Entries on one page of the Entries view.")
    health_interval: float = Field(
        5.0, gt=0, description="Seconds between two samples of the Health page's charts."
    )
    health_samples: int = Field(
        120, ge=2, le=10000, description="Samples each Health chart keeps (the oldest drop out)."
    )


class WatchConfig(_Section):
    """Change streams (`memory/watch`, docs/protocol.md): the change log and its watchers."""

    retention_seconds: float = Field(
        86_400.0, gt=0, description="Seconds the change log keeps a change; a `since` cursor"
        " older than what is kept is answered `cursor_expired`."
    )
    retention_rows: int = Field(
        100_000, ge=1, description="Changes (committed requests) the log keeps a namespace, the"
        " newest; older ones go as if past `retention_seconds`."
    )
    max_pending_events: int = Field(
        1_000, ge=1, description="Events of one watch waiting to be sent to a client that does"
        " not read; one more ends the watch (`memory/watch/ended/event`, reason `lagging`), as"
        " does passing `limits.max_unsent_bytes`."
    )
    max_watches_per_connection: int = Field(
        16, ge=1, description="Watches one connection may hold; one more is `memory_full`."
    )
    poll_interval: float = Field(
        0.5, gt=0, description="Seconds between looks at the change log for changes another"
        " process committed (the CLI or the library on a SQLite file; on PostgreSQL hosts are"
        " also told at once by LISTEN/NOTIFY, and this catches what a dropped connection lost)."
    )
