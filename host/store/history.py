"""History and consolidation records, the same on every backend (docs/protocol.md, "History"
and "Consolidation on write").

A version of an entry that is no longer current (`HistoryVersion`) is kept by the backend's
history (SQLite: `host.store.sqlite.history`; PostgreSQL: `host.store.postgres.history`): an
earlier content a store replaced (reason `updated`) or an entry consolidation on write retired
in favour of a newer near-duplicate (reason `superseded`). A merge is logged as a change of its
own, op `consolidated`, one record a merge (`consolidation_record`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

__all__ = ["CONSOLIDATED", "HistoryVersion", "Merges", "Retention", "consolidation_record"]

CONSOLIDATED = "consolidated"  # the change-log op of a merge
# merges of one request: (tier, the existing entry's key, the new entry's key, similarity)
Merges = Sequence[tuple[str, bytes, bytes, float]]


@dataclass(frozen=True, slots=True)
class Retention:
    """How much history a backend keeps: `keep` versions a key, for `seconds`, and at most
    `max_retired` retired entries a namespace (the oldest go first)."""

    keep: int = 10
    seconds: float = 30 * 86_400.0
    max_retired: int = 10_000


@dataclass(frozen=True, slots=True)
class HistoryVersion:
    """One version of an entry: the current one (`reason` "current", `replaced_at` None) or
    an earlier one, with when and why it was replaced (`by`: the key that superseded it, and
    the `similarity` that decided, for `superseded`); `valid_from` / `valid_until`: when the
    version's fact held (the time extension), None open on that side."""

    tier: str
    key: bytes  # canonical key JSON
    content: bytes  # raw JSON
    tags: list[str]
    source: str
    score: float
    created_at: float
    updated_at: float
    replaced_at: float | None
    reason: str
    by: bytes | None
    similarity: float | None
    valid_from: float | None = None
    valid_until: float | None = None


class _Merge(msgspec.Struct):
    """The wire form of a merge in a `consolidated` event: the existing entry's key, tier and
    tags, what was done (`superseded`: retired, its content kept in history; `skipped`: the
    new entry was not stored), the new entry's key (`with`) and the similarity that decided."""

    key: msgspec.Raw
    tier: str
    tags: list[str]
    action: str
    with_: msgspec.Raw = msgspec.field(name="with")
    similarity: float = 0.0


_encode = msgspec.json.Encoder().encode


def consolidation_record(tier: str, owner: str, key: bytes, tags: list[str], action: str,
                         with_key: bytes, similarity: float
                         ) -> tuple[str, str, msgspec.Raw, list[str], msgspec.Raw]:
    """The change-log record of one merge (`host.store.changes`: `[tier, owner, key, tags,
    entry]`, addressed by the existing entry's key)."""
    k = msgspec.Raw(key)
    wire = _Merge(k, tier, tags, action, msgspec.Raw(with_key), round(float(similarity), 4))
    return (tier, owner, k, tags, msgspec.Raw(_encode(wire)))

