"""The one mapping between the library's `Memory` and the wire's `MemoryEntry`.

`memory_to_entry` and `entry_to_memory` are the function pair used by the host, the MCP tools and
export/import alike; the smaller functions below are their parts.

| Memory          | wire entry                                                         |
|-----------------|--------------------------------------------------------------------|
| id              | key `{"id": id}` (a store key other than the id: content `"id"`)   |
| content         | content `{"text": content, "metadata": metadata}`                  |
| metadata        | (inside content, above)                                            |
| memory_type     | tier (`TYPE_TIER`) and the tag `type:<memory_type>`                |
| importance      | score: low 0.25, medium 0.5, high 0.75, critical 1.0; back by nearest |
| created_at      | created_at (Unix seconds)                                          |
| last_accessed   | updated_at (Unix seconds)                                          |
| valid_from      | valid_from (Unix seconds), only when set                           |
| valid_until     | valid_until (Unix seconds), only when set                          |
| -               | source `""`, ttl `0`                                               |

`procedural` has no wire tier: it is stored in the `semantic` tier (how-to knowledge is shared
like facts) and told apart by its `type:procedural` tag. Every entry carries its `type:` tag, so
a wire client can filter on it (`tags: ["type:procedural"]`).

Exactness: `entry_to_memory(memory_to_entry(m)) == m` for every memory whose datetimes lie
between the years 1900 and 2200 (Unix seconds as a float keep microseconds there); datetimes come
back in UTC (the same instants). `memory_to_entry(entry_to_memory(e), key_to_id(e["key"])) == e`
for every `e` that `memory_to_entry` returned.

Entries written by other wire clients are read as well as they can be: a string content is the
text; other JSON content becomes its canonical JSON text; the type comes from a `type:` tag
naming a known type, else from the tier; the importance is the level nearest the score (a tie
goes to the higher level); a key other than `{"id": str}` becomes its canonical JSON text
(RFC 8785) as the id. Their source, ttl and other tags have no place in `Memory` and are not kept.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from host.library.models import Memory, MemoryImportance, MemoryType, utc_now
from protocol.keys import canonical_json

if TYPE_CHECKING:
    from host.store.records import StoredEntry

__all__ = [
    "IMPORTANCE_SCORE",
    "TYPE_TAG_PREFIX",
    "TYPE_TIER",
    "WIRE_TIERS",
    "entry_to_memory",
    "id_to_key",
    "importance_to_score",
    "key_to_id",
    "memory_to_entry",
    "score_to_importance",
    "stored_to_memory",
    "tier_and_tags",
    "type_of",
]

WIRE_TIERS: tuple[str, ...] = ("working", "episodic", "semantic")

# The wire tier of each memory type; a type not listed here is stored in the semantic tier.
TYPE_TIER: dict[MemoryType, str] = {
    MemoryType.EPISODIC: "episodic",
    MemoryType.SEMANTIC: "semantic",
    MemoryType.PROCEDURAL: "semantic",
    MemoryType.WORKING: "working",
}

# The memory type a tier means when an entry carries no `type:` tag.
_TIER_TYPE: dict[str, MemoryType] = {
    "episodic": MemoryType.EPISODIC,
    "semantic": MemoryType.SEMANTIC,
    "working": MemoryType.WORKING,
}

TYPE_TAG_PREFIX = "type:"

# The wire score of each importance level (also the importance term of the ranking formula).
IMPORTANCE_SCORE: dict[MemoryImportance, float] = {
    MemoryImportance.LOW: 0.25,
    MemoryImportance.MEDIUM: 0.5,
    MemoryImportance.HIGH: 0.75,
    MemoryImportance.CRITICAL: 1.0,
}

_CONTENT_KEYS = frozenset({"text", "metadata", "id"})


def importance_to_score(importance: MemoryImportance) -> float:
    """The wire score in [0, 1] of an importance level."""
    return IMPORTANCE_SCORE[importance]


def score_to_importance(score: float) -> MemoryImportance:
    """The importance level whose score is nearest `score`; a tie goes to the higher level.

    Raises `ValueError` for a score outside [0, 1].
    """
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"score must be in [0, 1], not {score!r}")
    best = max(IMPORTANCE_SCORE.items(), key=lambda kv: (-abs(kv[1] - score), kv[1]))
    return best[0]


def tier_and_tags(memory_type: MemoryType) -> tuple[str, list[str]]:
    """The wire tier and tags of a memory type: `(TYPE_TIER[t] or "semantic", ["type:<t>"])`."""
    return TYPE_TIER.get(memory_type, "semantic"), [TYPE_TAG_PREFIX + memory_type.value]


def type_of(tier: str, tags: list[str] | tuple[str, ...]) -> MemoryType:
    """The memory type of a wire entry: its first `type:` tag naming a known type, else its tier.

    Raises `ValueError` for a tier that is not a wire tier.
    """
    for tag in tags:
        if tag.startswith(TYPE_TAG_PREFIX):
            try:
                return MemoryType(tag[len(TYPE_TAG_PREFIX) :])
            except ValueError:
                continue
    try:
        return _TIER_TYPE[tier]
    except KeyError:
        raise ValueError(f"tier must be one of {WIRE_TIERS}, not {tier!r}") from None


def id_to_key(memory_id: str) -> dict[str, Any]:
    """The wire key of a memory id: `{"id": memory_id}`."""
    return {"id": memory_id}


def key_to_id(key: dict[str, Any]) -> str:
    """The memory id of a wire key: the id of `{"id": str}`, else the key's canonical JSON."""
    if len(key) == 1 and isinstance(key.get("id"), str):
        return str(key["id"])
    return canonical_json(key)


def _datetime(ts: Any) -> datetime:
    if ts is None:
        return utc_now()
    return datetime.fromtimestamp(float(ts), UTC)


def memory_to_entry(memory: Memory, key: str | None = None) -> dict[str, Any]:
    """The wire `MemoryEntry` (a JSON-ready dict) of `memory`, stored under `key`.

    `key` defaults to `memory.id`; when it differs, the content also carries `"id"` so that
    `entry_to_memory` gives the memory back unchanged. The memory's window is checked first
    (`Memory.window`: ValueError when it is bad) and carried only when set.
    """
    valid_from, valid_until = memory.window()
    store_key = memory.id if key is None else key
    tier, tags = tier_and_tags(memory.memory_type)
    content: dict[str, Any] = {"text": memory.content, "metadata": memory.to_dict()["metadata"]}
    if store_key != memory.id:
        content["id"] = memory.id
    entry: dict[str, Any] = {
        "key": id_to_key(store_key),
        "content": content,
        "tier": tier,
        "tags": tags,
        "source": "",
        "score": importance_to_score(memory.importance),
        "ttl": 0,
        "created_at": memory.created_at.timestamp(),
        "updated_at": memory.last_accessed.timestamp(),
    }
    if valid_from is not None:
        entry["valid_from"] = valid_from
    if valid_until is not None:
        entry["valid_until"] = valid_until
    return entry


def _text_and_metadata(content: Any) -> tuple[str, dict[str, Any], str | None]:
    if isinstance(content, str):
        return content, {}, None
    if (
        isinstance(content, dict)
        and isinstance(content.get("text"), str)
        and isinstance(content.get("metadata", {}), dict)
        and isinstance(content.get("id", ""), str)
        and set(content) <= _CONTENT_KEYS
    ):
        return content["text"], dict(content.get("metadata", {})), content.get("id")
    return canonical_json(content), {}, None


def entry_to_memory(entry: dict[str, Any]) -> Memory:
    """The `Memory` of a wire `MemoryEntry` dict (see the module docstring for the rules).

    Raises `ValueError` (or its subclass `pydantic.ValidationError`) for an entry without an
    object `key`, with an unknown tier, or a score outside [0, 1].
    """
    key = entry.get("key")
    if not isinstance(key, dict) or not key:
        raise ValueError("entry key must be a non-empty JSON object")
    text, metadata, content_id = _text_and_metadata(entry.get("content"))
    return Memory(
        id=content_id if content_id is not None else key_to_id(key),
        content=text,
        memory_type=type_of(str(entry.get("tier", "")), list(entry.get("tags", []))),
        importance=score_to_importance(float(entry.get("score", 1.0))),
        created_at=_datetime(entry.get("created_at")),
        last_accessed=_datetime(entry.get("updated_at")),
        metadata=metadata,
        valid_from=entry.get("valid_from"),
        valid_until=entry.get("valid_until"),
    )


def stored_to_memory(e: StoredEntry, updated_at: float | None = None) -> Memory:
    """The `Memory` of an entry read from the host's `EntryStore` (`entry_to_memory` of its wire
    fields), last accessed at `updated_at` when given, else at the entry's `updated_at`."""
    return entry_to_memory({
        "key": json.loads(e.key), "content": json.loads(e.content), "tier": e.tier,
        "tags": e.tags, "score": e.score, "created_at": e.created_at,
        "updated_at": e.updated_at if updated_at is None else updated_at,
        "valid_from": e.valid_from, "valid_until": e.valid_until,
    })
