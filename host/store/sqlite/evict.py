"""Eviction on SQLite (`limits.on_full` "evict", docs/growth.md): make room for a store that
would pass a quota by deleting as few as needed of the storing agent's own entries.

`host.store.sqlite.ops.put_entries` calls `evict` inside its transaction, after it has
collected the namespace's expired entries (the first step of the order) and found the entry
still over a quota. The candidates are the live entries of the namespace whose writer
(`agent`, the column the per-agent quotas count) is the storing agent: its episodic entries
and the semantic entries it last wrote; never another agent's, never the entry being
written. They go in `VALUE_ORDER` (the second step, superseded and duplicated entries, is a
slot the judgement work fills: `_superseded`), one `evicted` change a put in the change log.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import msgspec

from host.store.base import Quotas
from host.store.changes import removed_record
from host.store.sqlite.changes import log_change

__all__ = ["VALUE_ORDER", "choose", "evict", "make_room"]

# lowest stored score first, then the longest since written or read (`touch` moves
# `updated_at` forward on a read: it is the later of the last write and the last read), then
# the oldest row
VALUE_ORDER = "score, updated_at, id"

_tags = msgspec.json.Decoder(list[str])
_ids = msgspec.json.Encoder()

# the agent's entries of one tier, worth least first: the rank index
# (namespace, tier, owner, score DESC, updated_at DESC) read backwards
_BY_VALUE = ("SELECT score, updated_at, id, size FROM entries WHERE namespace = ? AND tier = ?"
             " AND owner = ? AND agent = ? AND id NOT IN (SELECT value FROM json_each(?))"
             f" ORDER BY {VALUE_ORDER}")


def _superseded(conn: sqlite3.Connection, namespace: str, agent: str, keep: str
                ) -> Iterator[tuple[int, int]]:
    """The second step: (id, size) of the agent's entries superseded by a newer one or
    duplicating another, surest first. None yet: the judgement work marks them."""
    return iter(())


def _by_value(conn: sqlite3.Connection, namespace: str, agent: str, keep: str
              ) -> Iterator[tuple[int, int]]:
    """The third step: (id, size) of the agent's live entries in `VALUE_ORDER`, read lazily
    (episodic and semantic merged; a put stops reading once it has room)."""
    tiers = [conn.execute(_BY_VALUE, (namespace, "episodic", agent, agent, keep)),
             conn.execute(_BY_VALUE, (namespace, "semantic", "", agent, keep))]
    try:
        for _score, _updated, id_, size in heapq.merge(*tiers):
            yield id_, size
    finally:
        for cur in tiers:
            cur.close()


def choose(conn: sqlite3.Connection, namespace: str, agent: str, keep: Sequence[int],
           fits: Callable[[int, int], bool]) -> list[int]:
    """The fewest rows, in eviction order, whose removal makes `fits(entries, bytes)` true
    (it says whether the put has room once that many entries and bytes of the agent's are
    gone); [] when even all of them would not (the caller checks that first, from the usage
    counters, so it never reads the agent's rows for nothing)."""
    chosen: list[int] = []
    n = b = 0
    seen: set[int] = set()
    kept = _ids.encode(list(keep)).decode()
    for step in (_superseded, _by_value):
        for id_, size in step(conn, namespace, agent, kept):
            if id_ in seen:
                continue
            seen.add(id_)
            chosen.append(id_)
            n, b = n + 1, b + size
            if fits(n, b):
                return chosen
    return []


def evict(conn: sqlite3.Connection, namespace: str, agent: str, keep: Sequence[int],
          fits: Callable[[int, int], bool], now: float) -> int:
    """Delete the rows `choose` picks (inside the caller's transaction; their keyword rows go
    when the caller's `Deferred` is flushed, as a forget's) and log them as one `evicted`
    change; how many."""
    ids = choose(conn, namespace, agent, keep, fits)
    if not ids:
        return 0
    rows = conn.execute(
        "DELETE FROM entries WHERE id IN (SELECT value FROM json_each(?))"
        " RETURNING tier, owner, key, tags", (_ids.encode(ids).decode(),)).fetchall()
    log_change(conn, namespace, "evicted",
               [removed_record(r[0], r[1], r[2].encode(), _tags.decode(r[3])) for r in rows], now)
    return len(rows)


class _Usage(Protocol):
    """The usage a put keeps (`host.store.sqlite.ops._Usage`)."""

    agent_entries: int
    agent_bytes: int

    def over(self, q: Quotas, ns: tuple[int, int], agent: tuple[int, int]) -> bool: ...

    def add(self, ns: tuple[int, int], agent: tuple[int, int]) -> None: ...


def make_room(conn: sqlite3.Connection, namespace: str, agent: str, usage: _Usage,
              quotas: Quotas, growth: tuple[tuple[int, int], tuple[int, int]],
              row: tuple[Any, ...] | None, stored: Sequence[int], now: float) -> int:
    """Evict what a put of `growth` needs, if the agent's own entries can give it room at all
    (checked on the usage counters first: nothing is removed for a put that would be refused
    anyway); `row` is the entry the put replaces ((id, expires_at, agent, size, ...); None:
    a new key) and `stored` the rows the put has written before: none of them is evicted.
    How many went."""
    own = (1, row[3]) if row is not None and row[2] == agent else (0, 0)

    def fits(n: int, b: int) -> bool:
        usage.add((-n, -b), (-n, -b))
        try:
            return not usage.over(quotas, *growth)
        finally:
            usage.add((n, b), (n, b))

    if not fits(usage.agent_entries - own[0], usage.agent_bytes - own[1]):
        return 0
    keep = [*stored, row[0]] if row is not None else stored
    return evict(conn, namespace, agent, keep, fits, now)
