"""The library's model (host/library/models.py): enums, defaults, validation, the dict round trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from library_strategies import memories
from pydantic import ValidationError

from host.library import Memory, MemoryImportance, MemoryType, RetrievalResult


def test_enums_are_strings() -> None:
    """Types and levels are string-valued: constructed from and serialised as their values."""
    assert [t.value for t in MemoryType] == ["episodic", "semantic", "procedural", "working"]
    assert [i.value for i in MemoryImportance] == ["low", "medium", "high", "critical"]
    assert MemoryType("procedural") is MemoryType.PROCEDURAL
    assert json.dumps(MemoryImportance.HIGH) == '"high"'


def test_defaults() -> None:
    """A new memory gets a UUID, UTC timestamps, episodic type, medium importance."""
    before = datetime.now(UTC)
    m = Memory(content="x")
    assert len(m.id) == 36 and m.id != Memory(content="x").id
    assert m.memory_type is MemoryType.EPISODIC and m.importance is MemoryImportance.MEDIUM
    assert m.created_at >= before and m.created_at.tzinfo is not None
    assert m.last_accessed >= before and m.metadata == {}


def test_naive_datetime_rejected() -> None:
    """A datetime without a timezone is refused."""
    with pytest.raises(ValidationError):
        Memory(content="x", created_at=datetime(2024, 1, 1))


@pytest.mark.parametrize("metadata", [{"x": float("nan")}, {"x": [float("inf")]}, {"x": object()}])
def test_non_json_metadata_rejected(metadata: dict) -> None:
    """Metadata must be JSON: no NaN, no Infinity, no arbitrary objects."""
    with pytest.raises(ValidationError):
        Memory(content="x", metadata=metadata)


def test_unknown_type_rejected() -> None:
    """A memory type that is not an enum value is refused."""
    with pytest.raises(ValidationError):
        Memory(content="x", memory_type="dream")


def test_to_dict_is_plain_json() -> None:
    """`to_dict` gives enum values and ISO 8601 datetimes with their offset."""
    when = datetime(2025, 3, 1, 12, 0, 0, 5, tzinfo=UTC)
    m = Memory(id="a", content="c", memory_type="semantic", importance="critical",
               created_at=when, last_accessed=when, metadata={"k": [1]})
    assert m.to_dict() == {
        "id": "a", "content": "c", "memory_type": "semantic", "importance": "critical",
        "created_at": "2025-03-01T12:00:00.000005+00:00",
        "last_accessed": "2025-03-01T12:00:00.000005+00:00", "metadata": {"k": [1]},
    }


@given(memories())
def test_from_dict_inverts_to_dict(m: Memory) -> None:
    """from_dict(to_dict(m)) == m, and to_dict of that is the same dict, through JSON text too."""
    d = m.to_dict()
    back = Memory.from_dict(json.loads(json.dumps(d)))
    assert back == m
    assert back.to_dict() == d


def test_to_dict_does_not_share_metadata() -> None:
    """Changing the dict `to_dict` returned leaves the memory alone."""
    m = Memory(content="x", metadata={"l": [1]})
    m.to_dict()["metadata"]["l"].append(2)
    assert m.metadata == {"l": [1]}


def test_retrieval_result_scores_bounded() -> None:
    """Relevance and combined scores outside [0, 1] are refused."""
    with pytest.raises(ValidationError):
        RetrievalResult(memory=Memory(content="x"), relevance_score=1.5, combined_score=0.5)
