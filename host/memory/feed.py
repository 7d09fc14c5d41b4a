"""What a change stream is made of (`host.memory.watch` serves them): a watch, its cursor, and
the feed of one namespace.

A `Watch` is one `memory/watch` of one session: what it may see (`visible`), where it is in the
namespace's change log (`position`, and `cursor`, which `parse_cursor` reads back). A `Feed`
reads the log once for every watch of its namespace and keeps the newest changes it read,
decoded (`RING` of them and at most `RING_BYTES` with their encodings), so a live watch is
served from memory; a watch behind them replays from the log.
"""

from __future__ import annotations

import asyncio
import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from host.core.context import ConnectionContext
from host.store.changes import ChangedEntry, decode_entries
from host.store.records import Change, Scope
from protocol.errors import ErrorCode, ProtocolError

__all__ = ["RING", "RING_BYTES", "Feed", "Row", "Watch", "WatchState", "parse_cursor"]

RING = 512  # decoded changes a feed keeps (a live watch behind them replays from the log)
RING_BYTES = 8 * 1024 * 1024  # ... and at most this many bytes of them and their encodings


class WatchState(Enum):
    """Where a watch is: waiting for its reply to go out, replaying the log, live, ended."""

    STARTING = "starting"
    REPLAYING = "replaying"
    LIVE = "live"
    ENDED = "ended"


_CURSOR = re.compile(r"(0|[1-9][0-9]{0,17})(?:\.([1-9][0-9]{0,17}))?", re.ASCII)


def parse_cursor(cursor: str, req_id: str) -> int:
    """The durable position of a cursor ("" = none: -1). Raises `invalid_message` (field
    `since`) for any string this host does not give out: a cursor is the decimal number of a
    change of the namespace, with no leading zero, optionally `.<n>` (n from 1) after it."""
    if not cursor:
        return -1
    m = _CURSOR.fullmatch(cursor)
    if m is None:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                            f"not a cursor of this host: {cursor[:40]!r}", req_id=req_id,
                            field="since")
    return int(m.group(1))


@dataclass(eq=False, slots=True)
class Watch:
    """One `memory/watch` of one session."""

    id: str
    ctx: ConnectionContext
    memory_id: str
    scope: Scope
    tier: str  # as requested ("" = every readable tier)
    tiers: frozenset[str]
    keys: frozenset[bytes]
    tags: frozenset[str]
    position: int  # the last change delivered (or passed over: nothing in it to see)
    until: int = 0  # a `since` watch replays from the log at least up to the head it started at
    state: WatchState = WatchState.STARTING
    working: int = 0  # working-tier events sent since `position` moved
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def cursor(self) -> str:
        """The cursor of the last event sent."""
        return f"{self.position}.{self.working}" if self.working else str(self.position)

    def visible(self, e: ChangedEntry) -> bool:
        """True when a retrieve of the session could read `e` and the filters keep it."""
        if e.tier not in self.tiers:
            return False
        if e.tier == "episodic" and e.owner != self.scope.agent:
            return False
        if self.keys and e.key not in self.keys:
            return False
        return not self.tags or self.tags <= e.tags


@dataclass(slots=True)
class Row:
    """One change of the log as a feed holds it: its entries decoded."""

    seq: int
    op: str
    entries: list[ChangedEntry]
    size: int  # bytes of the change as logged
    every: bytes | None = None  # the JSON array of all its entries, once a watch saw them all


class Feed:
    """The watches of one namespace and the newest changes read for them."""

    def __init__(self, namespace: str, last: int) -> None:
        self.namespace = namespace
        self.watches: dict[str, Watch] = {}
        self.rows: list[Row] = []
        self.seqs: list[int] = []
        self.complete_after = last  # `rows` holds every change after this one, up to `last`
        self.last = last
        self.bytes = 0  # the `size` of `rows`
        self.fetching: asyncio.Task[None] | None = None
        self.again = False

    def add(self, changes: Sequence[Change]) -> None:
        for c in changes:
            if c.seq <= self.last:
                continue
            self.rows.append(Row(c.seq, c.op, decode_entries(c.entries), len(c.entries)))
            self.seqs.append(c.seq)
            self.bytes += len(c.entries)
            self.last = c.seq
        if len(self.rows) > RING or (self.bytes > RING_BYTES and len(self.rows) > 1):
            cut, left = 0, self.bytes  # down to half the count and half the bytes
            while cut < len(self.rows) - 1 and (len(self.rows) - cut > RING // 2
                                                or left > RING_BYTES // 2):
                row = self.rows[cut]
                left -= row.size + (len(row.every) if row.every is not None else 0)
                cut += 1
            self.complete_after = self.seqs[cut - 1]
            self.bytes = left
            del self.rows[:cut]
            del self.seqs[:cut]

    def after(self, position: int) -> list[Row]:
        """The rows after `position` (which is at least `complete_after`)."""
        return self.rows[bisect.bisect_right(self.seqs, position):]
