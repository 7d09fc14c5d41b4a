"""The host's configuration: one pydantic model, every default and limit in one place.

Each setting has a default here and only here; other modules read the values from a
`Config` instance. `load_config()` builds one from an optional TOML file and overrides.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Config",
    "GcConfig",
    "LimitsConfig",
    "RankingConfig",
    "RulesConfig",
    "ServerConfig",
    "StoreConfig",
    "load_config",
]

MIB = 1024 * 1024


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ServerConfig(_Section):
    """Where and how the WebSocket server listens."""

    host: str = Field("127.0.0.1", description="Address to bind.")
    port: int = Field(8765, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    compression: bool = Field(
        False, description="Negotiate permessage-deflate (costs ~35% CPU on small frames)."
    )
    drain_timeout: float = Field(
        10.0, ge=0, description="Seconds to let in-flight requests finish on shutdown."
    )


class StoreConfig(_Section):
    """The persistent store for the episodic and semantic tiers."""

    db: str = Field("./a2e-host.db", description="SQLite file path.")
    batch_max: int = Field(
        512, ge=1, description="Most write operations one group commit gathers."
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


class Config(_Section):
    """The whole configuration of one host."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    ranking: RankingConfig = Field(default_factory=RankingConfig)
    gc: GcConfig = Field(default_factory=GcConfig)
    rules: RulesConfig = Field(default_factory=RulesConfig)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Build a `Config` from a TOML file (if given) and then `overrides`.

    `overrides` maps section names to dicts of settings (`{"server": {"port": 0}}`).
    Raises `pydantic.ValidationError` naming the bad setting, or `OSError`/`tomllib.TOMLDecodeError`
    for an unreadable file.
    """
    data: dict[str, Any] = {}
    if path is not None:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update(values)
    return Config.model_validate(data)
