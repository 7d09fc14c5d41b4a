"""The change log: one record a committed write, for `memory/watch` (docs/protocol.md).

Every backend writes its log in the same transaction as the write it records, so a change is
in the log exactly when it is committed: one `Change` a committed request (a store of 20 entries
is one change of 20 entries), one a collection of expired entries per namespace. Changes of one
namespace carry strictly increasing sequence numbers in commit order (`seq`): on SQLite the
log's rowid (one writer), on PostgreSQL a counter per namespace bumped under the namespace's
lock. A watcher's cursor is such a number.

A change's entries travel as one JSON array, written once by the writer and read back as is:
each element `[tier, owner, key, tags, entry]`, where `owner` decides visibility (the episodic
owner, "" for semantic; never sent), `key` is the canonical key and `entry` the JSON object an
event carries (for `stored` the entry as a retrieve returns it, its `valid_from` / `valid_until`
only when it has them; for `forgotten` and `expired` its key, tier and tags).

A forget forgets: when an entry is deleted (forgotten, expired, collected), the records of the
`stored` changes that carry its content are removed from them in the same transaction
(`without_entries`), so a replay with an old cursor shows the `forgotten` or `expired` change
and never the content. A `stored` change left with no record stays, empty (nobody is sent it),
so the numbers of the changes do not move.

The log is kept for `watch.retention_seconds` and at most `watch.retention_rows` changes a
namespace (`EntryStore.prune_changes`); the highest sequence pruned from a namespace is its
*floor*: a cursor below it may have missed changes and is refused (`cursor_expired`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "PAGE",
    "PAGE_BYTES",
    "ChangedEntry",
    "decode_entries",
    "encode_records",
    "removed_record",
    "stored_record",
    "whole_changes",
    "without_entries",
]

PAGE = 256  # changes one read of the log by a follower returns at most (`changes_after`)
PAGE_BYTES = 1024 * 1024  # ... and at most this many bytes of them (one change beyond)

_Record = tuple[str, str, msgspec.Raw, list[str], msgspec.Raw]
_records_decoder = msgspec.json.Decoder(list[tuple[str, str, msgspec.Raw, list[str], msgspec.Raw]])
_encode = msgspec.json.Encoder().encode


class _Stored(msgspec.Struct, omit_defaults=True):
    """The wire form of a stored entry in an event (the fields of a retrieve's entry; the
    time extension's bounds only when the entry has them)."""

    key: msgspec.Raw
    content: msgspec.Raw
    tier: str
    tags: list[str]
    source: str
    score: float
    ttl: int
    created_at: float
    updated_at: float
    valid_from: float | UnsetType = UNSET
    valid_until: float | UnsetType = UNSET


class _Removed(msgspec.Struct):
    """The wire form of a forgotten or expired entry in an event."""

    key: msgspec.Raw
    tier: str
    tags: list[str]


def stored_record(
    tier: str, owner: str, key: bytes, content: bytes, tags: list[str], source: str,
    score: float, ttl: int, created_at: float, updated_at: float,
    valid_from: float | None = None, valid_until: float | None = None,
) -> _Record:
    """The log record of an entry as stored (`key` canonical JSON, `content` raw JSON; the
    bounds, when set, as the time extension's `valid_from` / `valid_until`)."""
    k = msgspec.Raw(key)
    wire = _Stored(k, msgspec.Raw(content), tier, tags, source, score, ttl, created_at,
                   updated_at, UNSET if valid_from is None else valid_from,
                   UNSET if valid_until is None else valid_until)
    return (tier, owner, k, tags, msgspec.Raw(_encode(wire)))


def removed_record(tier: str, owner: str, key: bytes, tags: list[str]) -> _Record:
    """The log record of a forgotten or expired entry."""
    k = msgspec.Raw(key)
    return (tier, owner, k, tags, msgspec.Raw(_encode(_Removed(k, tier, tags))))


def encode_records(records: Sequence[_Record]) -> bytes:
    """The JSON array a change holds."""
    return _encode(records)


def without_entries(data: bytes | str, addresses: set[tuple[str, str, bytes]]) -> bytes:
    """A change's JSON array without the records of the entries at `addresses`
    (tier, owner, canonical key): what is left of a `stored` change once they are deleted."""
    records = _records_decoder.decode(data)
    return _encode([r for r in records if (r[0], r[1], bytes(r[2])) not in addresses])


@dataclass(frozen=True, slots=True)
class ChangedEntry:
    """One entry of a change, as the watch filters read it."""

    tier: str
    owner: str
    key: bytes  # canonical key JSON
    tags: frozenset[str]
    wire: msgspec.Raw  # the JSON object an event carries


def decode_entries(data: bytes | str) -> list[ChangedEntry]:
    """The entries of a change's JSON array (`encode_records`)."""
    return [ChangedEntry(t, o, bytes(k), frozenset(g), w) for t, o, k, g, w in
            _records_decoder.decode(data)]


def whole_changes(rows: list[Any], limit: int, head: int) -> tuple[int, list[Any], bool]:
    """A page of a change log's `(seq, ...)` rows, read `limit` + 1 at most in order up to
    `head`, cut to whole changes: (the change number read up to, the rows kept, True when a
    single change holds more than `limit` rows and must be read whole instead)."""
    if len(rows) <= limit:
        return head, rows, False
    upto = int(rows[-1][0])
    if int(rows[0][0]) == upto:  # one change larger than the limit
        return upto, [], True
    upto -= 1  # the last change may be cut: it comes whole next time
    return upto, [r for r in rows if r[0] <= upto], False
