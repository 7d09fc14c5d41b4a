"""The Agentic Memory model: `Memory`, its type and importance, and `RetrievalResult`.

These are the types of the A2E Agentic Memory interface. Enum members are strings, so
`MemoryType("episodic")` and `MemoryType.EPISODIC.value == "episodic"` hold and JSON carries the
plain value. New types or levels are added by adding enum members (and, for a type, its wire tier
in `host.library.mapping.TYPE_TIER`; for a level, its score in `IMPORTANCE_SCORE`).

Datetimes are always timezone-aware: a naive datetime, or one whose UTC offset has a fraction of
a second, is rejected (`pydantic.ValidationError`).
`metadata` holds JSON values only (finite numbers), so every `Memory` can be written to a file or
the wire as it is.

`valid_from` / `valid_until` say when the memory's fact holds, [valid_from, valid_until), as the
wire's time extension does (docs/protocol.md, "Time of a fact"); each is optional (None: open on
that side) and given as an aware datetime, epoch seconds or ISO 8601 text with a zone, read by the
wire's own rule (`protocol.validity`): a malformed instant, one outside the years 1 to 9999, or a
`valid_until` not after `valid_from` raises `pydantic.ValidationError`. A search's `as_of` is
read by the same rule (`as_of_seconds`).

`Memory.to_dict()` returns plain JSON types (enums as their values, datetimes as ISO 8601 text
with their UTC offset; the bounds only when set) and `Memory.from_dict()` is its exact inverse:
`Memory.from_dict(m.to_dict()) == m` and `Memory.from_dict(d).to_dict() == d` for every `d` that
`to_dict` returned.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    field_validator,
)

from protocol.validity import instant, window

__all__ = [
    "Memory",
    "MemoryImportance",
    "MemoryType",
    "RetrievalResult",
    "as_of_seconds",
    "copy_json",
    "new_id",
    "seconds_of",
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


def seconds_of(value: Any, field: str) -> float:
    """An instant given as an aware datetime, epoch seconds or ISO 8601 text with a zone, as
    epoch seconds: the wire's rule (`protocol.validity.instant`; a datetime is read as its ISO
    text, so a naive one is refused as a zoneless text is). ValueError naming `field`."""
    if isinstance(value, datetime):
        return instant(value.isoformat(), field)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{field}: an instant is a datetime with a zone, epoch seconds or"
                         f" ISO-8601 text, not {value!r}")
    return instant(value, field)


def as_of_seconds(as_of: datetime | float | str | None) -> float | None:
    """A search's `as_of` as epoch seconds (None: not asked): `seconds_of`'s rule, ValueError
    naming `as_of` when malformed."""
    return None if as_of is None else seconds_of(as_of, "as_of")


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
    # when the fact holds: [valid_from, valid_until), None open on that side
    valid_from: AwareDatetime | None = None
    valid_until: AwareDatetime | None = None

    @field_validator("valid_from", "valid_until", mode="before")
    @classmethod
    def _instant(cls, value: Any, info: Any) -> Any:
        # the wire's rule for an instant; ISO text keeps its offset, seconds are read in UTC
        if value is None:
            return None
        seconds = seconds_of(value, info.field_name)
        if isinstance(value, (datetime, str)):
            return datetime.fromisoformat(value) if isinstance(value, str) else value
        return datetime.fromtimestamp(seconds, UTC)

    @field_validator("valid_until")
    @classmethod
    def _window(cls, value: datetime | None, info: Any) -> datetime | None:
        # after valid_from (declared before it); run only when valid_until is given, so a
        # memory without bounds costs nothing here
        start = info.data.get("valid_from")
        if value is not None and start is not None:
            window(start.timestamp(), value.timestamp())
        return value

    @field_validator("created_at", "last_accessed", mode="before")
    @classmethod
    def _iso(cls, value: Any) -> Any:
        # Python's own parser reads back every offset `isoformat` writes (seconds and all).
        return datetime.fromisoformat(value) if isinstance(value, str) else value

    @field_validator("created_at", "last_accessed", "valid_from", "valid_until")
    @classmethod
    def _whole_second_offset(cls, value: datetime | None) -> datetime | None:
        offset = value.utcoffset() if value is not None else None
        if offset is not None and offset.microseconds:
            raise ValueError("UTC offsets must be whole seconds")
        return value

    @field_validator("metadata")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_finite(value)
        return value

    def window(self) -> tuple[float | None, float | None]:
        """When the fact holds, as epoch seconds (None: open on that side), checked by the
        wire's rule (`protocol.validity.window`) whatever was assigned since: ValueError when a
        bound is malformed or `valid_until` is not after `valid_from`. Every store calls it
        before it writes, so a bad window stores nothing."""
        if self.valid_from is None and self.valid_until is None:
            return None, None  # most memories: nothing to read
        start = None if self.valid_from is None else seconds_of(self.valid_from, "valid_from")
        end = None if self.valid_until is None else seconds_of(self.valid_until, "valid_until")
        return window(start, end)

    def to_dict(self) -> dict[str, Any]:
        """This memory as JSON-ready plain values; `from_dict` is the exact inverse. The
        bounds are there only when set."""
        out: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "memory_type": self.memory_type.value,
            "importance": self.importance.value,
            "created_at": self.created_at.isoformat(),
            "last_accessed": self.last_accessed.isoformat(),
            "metadata": copy_json(self.metadata),
        }
        if self.valid_from is not None:
            out["valid_from"] = self.valid_from.isoformat()
        if self.valid_until is not None:
            out["valid_until"] = self.valid_until.isoformat()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Memory:
        """Build a memory from `to_dict()` output (unknown keys are ignored).

        Raises `pydantic.ValidationError` for a missing `content`, an unknown type or level,
        a naive or malformed datetime, non-JSON metadata, or a bad window.
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
