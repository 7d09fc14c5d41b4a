"""The Agentic Memory model: `Memory`, its type and importance, and `RetrievalResult`.

These are the types of the A2E Agentic Memory interface. Enum members are strings, so
`MemoryType("episodic")` and `MemoryType.EPISODIC.value == "episodic"` hold and JSON carries the
plain value. New types or levels are added by adding enum members (and, for a type, its wire tier
in `host.library.mapping.TYPE_TIER`; for a level, its score in `IMPORTANCE_SCORE`).

Datetimes are always timezone-aware: a naive datetime, or one whose UTC offset has a fraction of
a second, is rejected (`pydantic.ValidationError`).
`metadata` holds JSON values only (finite numbers), so every `Memory` can be written to a file or
the wire as it is.

`Memory.to_dict()` returns plain JSON types (enums as their values, datetimes as ISO 8601 text
with their UTC offset) and `Memory.from_dict()` is its exact inverse:
`Memory.from_dict(m.to_dict()) == m` and `Memory.from_dict(d).to_dict() == d` for every `d` that
`to_dict` returned.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, field_validator

__all__ = [
    "Memory",
    "MemoryImportance",
    "MemoryType",
    "RetrievalResult",
    "copy_json",
    "new_id",
    "utc_now",
]


class MemoryType(StrEnum):
    """What kind of memory an entry is (FR-4)."""

    EPISODIC = "episodic"  # event-based: what happened
    SEMANTIC = "semantic"  # factual knowledge
    PROCEDURAL = "procedural"  # how-to
    WORKING = "working"  # temporary scratch


class MemoryImportance(StrEnum):
    """How much an entry matters; higher levels rank first at equal relevance (FR-5)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


def utc_now() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """A new unique memory id (a random UUID in its canonical text form)."""
    return str(uuid.uuid4())


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists and scalars), faster than `copy.deepcopy`."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def _check_finite(value: Any) -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("metadata numbers must be finite (JSON has no NaN or Infinity)")
    elif isinstance(value, dict):
        for v in value.values():
            _check_finite(v)
    elif isinstance(value, list):
        for v in value:
            _check_finite(v)


class Memory(BaseModel):
    """One memory entry (FR-1). Every field has a default except `content`.

    `id` is a UUID given at creation; `created_at` and `last_accessed` default to now (UTC).
    Stores keep their own copy: changing a `Memory` after `Store.set` does not change the store.
    """

    model_config = ConfigDict(extra="ignore")

    id: str = Field(default_factory=new_id)
    content: str
    memory_type: MemoryType = MemoryType.EPISODIC
    importance: MemoryImportance = MemoryImportance.MEDIUM
    created_at: AwareDatetime = Field(default_factory=utc_now)
    last_accessed: AwareDatetime = Field(default_factory=utc_now)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("created_at", "last_accessed", mode="before")
    @classmethod
    def _iso(cls, value: Any) -> Any:
        # Python's own parser reads back every offset `isoformat` writes (seconds and all).
        return datetime.fromisoformat(value) if isinstance(value, str) else value

    @field_validator("created_at", "last_accessed")
    @classmethod
    def _whole_second_offset(cls, value: datetime) -> datetime:
        offset = value.utcoffset()
        if offset is not None and offset.microseconds:
            raise ValueError("UTC offsets must be whole seconds")
        return value

    @field_validator("metadata")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_finite(value)
        return value

    def to_dict(self) -> dict[str, Any]:
        """This memory as JSON-ready plain values; `from_dict` is the exact inverse."""
        return {
            "id": self.id,
            "content": self.content,
            "memory_type": self.memory_type.value,
            "importance": self.importance.value,
            "created_at": self.created_at.isoformat(),
            "last_accessed": self.last_accessed.isoformat(),
            "metadata": copy_json(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Memory:
        """Build a memory from `to_dict()` output (unknown keys are ignored).

        Raises `pydantic.ValidationError` for a missing `content`, an unknown type or level,
        a naive or malformed datetime, or non-JSON metadata.
        """
        return cls.model_validate(data)

    def copy_for_store(self) -> Memory:
        """An independent copy (metadata deep-copied): what a store keeps or hands out."""
        return self.model_copy(update={"metadata": copy_json(self.metadata)})


class RetrievalResult(BaseModel):
    """One search hit (FR-2): the memory, its query relevance and its combined ranking score.

    `combined_score` is `host.search.rank.combined_score` of relevance, importance and recency.
    The judgement of the reply (`host.search.judgement`, as a `memory/retrieve` judges it):
    `supersedes`, the ids of the older memories this one replaces (it ranks above them), and
    `collapsed`, the ids of the near-duplicates it stands for (a search that asked to
    collapse them); both empty otherwise.
    """

    memory: Memory
    relevance_score: float = Field(ge=0.0, le=1.0)
    combined_score: float = Field(ge=0.0, le=1.0)
    supersedes: list[str] = Field(default_factory=list)
    collapsed: list[str] = Field(default_factory=list)
