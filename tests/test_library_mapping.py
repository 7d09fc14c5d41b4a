"""The Memory <-> wire entry mapping (host/library/mapping.py): parts, round trips, foreign entries."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from library_strategies import memories

from host.library import Memory, MemoryImportance, MemoryType, entry_to_memory, memory_to_entry
from host.library.mapping import (
    IMPORTANCE_SCORE,
    key_to_id,
    score_to_importance,
    tier_and_tags,
    type_of,
)
from protocol.codec import decode_entry

L, M, H, C = (MemoryImportance.LOW, MemoryImportance.MEDIUM, MemoryImportance.HIGH,
              MemoryImportance.CRITICAL)


def test_every_level_has_a_score_in_order() -> None:
    """Each importance level has a wire score, increasing with the level, critical = 1.0."""
    assert [IMPORTANCE_SCORE[i] for i in MemoryImportance] == [0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize(("score", "level"), [
    (0.0, L), (0.25, L), (0.3, L), (0.375, M), (0.5, M), (0.6, M), (0.625, H), (0.8, H),
    (0.875, C), (0.9, C), (1.0, C),
])
def test_score_to_nearest_level(score: float, level: MemoryImportance) -> None:
    """A score maps to the nearest level; a tie goes to the higher level."""
    assert score_to_importance(score) is level


@pytest.mark.parametrize("score", [-0.1, 1.01])
def test_score_out_of_range(score: float) -> None:
    """A score outside [0, 1] is refused."""
    with pytest.raises(ValueError):
        score_to_importance(score)


@pytest.mark.parametrize(("memory_type", "tier"), [
    (MemoryType.EPISODIC, "episodic"), (MemoryType.SEMANTIC, "semantic"),
    (MemoryType.PROCEDURAL, "semantic"), (MemoryType.WORKING, "working"),
])
def test_type_to_tier_and_back(memory_type: MemoryType, tier: str) -> None:
    """Each type has its tier and `type:` tag, and the pair maps back to the type."""
    got_tier, tags = tier_and_tags(memory_type)
    assert (got_tier, tags) == (tier, [f"type:{memory_type.value}"])
    assert type_of(got_tier, tags) is memory_type


def test_type_from_tier_without_tag() -> None:
    """Without a `type:` tag (or with an unknown one) the tier names the type."""
    assert type_of("episodic", ["prefs"]) is MemoryType.EPISODIC
    assert type_of("semantic", ["type:dream"]) is MemoryType.SEMANTIC
    with pytest.raises(ValueError):
        type_of("cosmic", [])


def test_entry_shape() -> None:
    """A memory maps to a wire entry with key {"id"}, content {text, metadata}, tier, tag, score."""
    m = Memory(id="m1", content="use ruff", memory_type="procedural", importance="high",
               metadata={"lang": "py"})
    e = memory_to_entry(m)
    assert e["key"] == {"id": "m1"}
    assert e["content"] == {"text": "use ruff", "metadata": {"lang": "py"}}
    assert (e["tier"], e["tags"], e["score"], e["source"], e["ttl"]) == (
        "semantic", ["type:procedural"], 0.75, "", 0)
    assert e["created_at"] == m.created_at.timestamp()
    assert e["updated_at"] == m.last_accessed.timestamp()


@given(memories(min_year=1900, max_year=2200), st.none() | st.text(min_size=1))
def test_memory_round_trip(m: Memory, key: str | None) -> None:
    """entry_to_memory(memory_to_entry(m, key)) == m, also through JSON text."""
    e = json.loads(json.dumps(memory_to_entry(m, key)))
    back = entry_to_memory(e)
    assert back == m
    assert back.created_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


@given(memories(min_year=1900, max_year=2200), st.none() | st.text(min_size=1))
def test_entry_round_trip(m: Memory, key: str | None) -> None:
    """An entry memory_to_entry made is a valid wire entry and survives entry_to_memory."""
    e = memory_to_entry(m, key)
    decode_entry(json.dumps(e).encode())  # the host's own decoder accepts it
    assert memory_to_entry(entry_to_memory(e), key_to_id(e["key"])) == e


def test_foreign_entry() -> None:
    """A wire client's entry reads as a memory: JSON content as text, type by tier, nearest level."""
    e = {"key": {"agent": "a1", "topic": "prefs"}, "content": {"language": "python"},
         "tier": "episodic", "tags": ["preferences"], "source": "turn-1", "score": 0.9, "ttl": 0,
         "created_at": 1716123456.5, "updated_at": 1716123457.5}
    m = entry_to_memory(e)
    assert m.id == '{"agent":"a1","topic":"prefs"}'
    assert m.content == '{"language":"python"}' and m.metadata == {}
    assert m.memory_type is MemoryType.EPISODIC and m.importance is MemoryImportance.CRITICAL
    assert m.created_at.timestamp() == 1716123456.5


def test_foreign_string_content_and_defaults() -> None:
    """A string content is the text; a missing score means 1.0 (critical), as on the wire."""
    m = entry_to_memory({"key": {"id": "x"}, "content": "hello", "tier": "semantic"})
    assert (m.id, m.content, m.memory_type, m.importance) == (
        "x", "hello", MemoryType.SEMANTIC, MemoryImportance.CRITICAL)


@pytest.mark.parametrize("entry", [
    {"key": {}, "content": "x", "tier": "episodic"},
    {"key": "k", "content": "x", "tier": "episodic"},
    {"key": {"id": "k"}, "content": "x", "tier": "nowhere"},
    {"key": {"id": "k"}, "content": "x", "tier": "episodic", "score": 2},
])
def test_bad_entry_refused(entry: dict) -> None:
    """An entry without an object key, with an unknown tier or a bad score is a ValueError."""
    with pytest.raises(ValueError):
        entry_to_memory(entry)
