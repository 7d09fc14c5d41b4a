"""Eviction on SQLite (`limits.on_full` "evict", docs/growth.md): make room for a store that
would pass a quota by deleting as few as needed of the storing agent's own entries.

`host.store.sqlite.writes.put_entries` calls `evict` inside its transaction, after it has
collected the namespace's expired entries (the first step of the order) and found the entry
still over a quota. The candidates are the live entries of the namespace whose writer
(`agent`, the column the per-agent quotas count) is the storing agent: its episodic entries
and the semantic entries it last wrote; never another agent's, never the entry being
written. They go in `VALUE_ORDER`, or by their faded value with `ranking.importance_half_life`
(the second step, superseded and duplicated entries, is a
slot the judgement work fills: `_superseded`), one `evicted` change a put in the change log.
"""

from __future__ import annotations

import heapq
import math
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import msgspec

from host.store.changes import removed_record
from host.store.records import Quotas
from host.store.sqlite.changes import log_change
from host.store.sqlite.read_times import LAST_USED

__all__ = ["VALUE_ORDER", "choose", "evict", "make_room"]

# lowest stored score first, then the longest since written or read (`LAST_USED`: the later
# of `updated_at`, which a write and the library's `touch` move, and `read_at`, a read over
# the wire), then the oldest row: the order of the index `entries_value`
VALUE_ORDER = f"score, {LAST_USED}, id"

_tags = msgspec.json.Decoder(list[str])
_ids = msgspec.json.Encoder()

# the agent's entries (its episodic ones and the semantic ones it wrote last: the rows whose
# writer it is), worth least first: the index `entries_value` read in order
_BY_VALUE = ("SELECT id, size FROM entries WHERE namespace = ? AND agent = ?"
             " AND id NOT IN (SELECT value FROM json_each(?))"
             f" ORDER BY {VALUE_ORDER}")
# with `ranking.importance_half_life`: by the score faded since the entry was last used,
# score * 0.5 ** ((now - used) / half_life), which orders as log2(score) + used / half_life
# whatever `now` is. No index holds that order (it depends on a setting), but within one score
# it is the index's (by last use), so the agent's distinct scores (`_SCORES`: one index seek
# each) give one ordered cursor each (`_OF_SCORE`), merged on the faded value: exact, and as
# cheap as the no-fade order while the agent uses a few scores. Past `MAX_SCORES` distinct
# scores, a scan of the agent's index range sorts them all (`_BY_FADED`).
MAX_SCORES = 64
_SCORES = ("WITH RECURSIVE s(v) AS (SELECT min(score) FROM entries"
           " WHERE namespace = ?1 AND agent = ?2"
           " UNION ALL SELECT (SELECT min(score) FROM entries"
           " WHERE namespace = ?1 AND agent = ?2 AND score > s.v) FROM s"
           " WHERE s.v IS NOT NULL) SELECT v FROM s WHERE v IS NOT NULL LIMIT ?3")
_OF_SCORE = (f"SELECT {LAST_USED}, id, size FROM entries"
             " WHERE namespace = ? AND agent = ? AND score = ?"
             " AND id NOT IN (SELECT value FROM json_each(?))"
             f" ORDER BY {LAST_USED}, id")
_BY_FADED = ("SELECT id, size FROM entries WHERE id IN (SELECT id FROM entries"
             " WHERE namespace = ? AND agent = ? AND id NOT IN (SELECT value FROM json_each(?))"
             f" ORDER BY a2e_faded(score, {LAST_USED}, ?), {LAST_USED}, id LIMIT ?)"
             f" ORDER BY a2e_faded(score, {LAST_USED}, ?), {LAST_USED}, id")


def _faded(score: float, used: float, half_life: float) -> float:
    """The order of an entry's faded value; a score of 0 first of all."""
    return math.log2(score) + used / half_life if score > 0 else -math.inf


def _merged(conn: sqlite3.Connection, namespace: str, agent: str, keep: str, half_life: float,
            scores: list[float]) -> Iterator[tuple[int, int]]:
    """The agent's entries by faded value: one cursor a score, merged lazily."""
    curs = [conn.execute(_OF_SCORE, (namespace, agent, v, keep)) for v in scores]
    try:
        for _, id_, size in heapq.merge(*(_faded_rows(cur, v, half_life)
                                          for v, cur in zip(scores, curs, strict=True))):
            yield id_, size
    finally:
        for cur in curs:
            cur.close()


def _faded_rows(rows: Iterable[tuple[float, int, int]], score: float, half_life: float
                ) -> Iterator[tuple[tuple[float, float, int], int, int]]:
    """((faded order, last used, id), id, size) of rows (last used, id, size) of one score,
    in order (a score of 0 is worth 0 whenever last used: by last use then, as without
    fading)."""
    for used, id_, size in rows:
        yield (_faded(score, used, half_life), used, id_), id_, size


def _superseded(conn: sqlite3.Connection, namespace: str, agent: str, keep: str
                ) -> Iterator[tuple[int, int]]:
    """The second step: (id, size) of the agent's entries superseded by a newer one or
    duplicating another, surest first. None yet: the judgement work marks them."""
    return iter(())


def _by_value(conn: sqlite3.Connection, namespace: str, agent: str, keep: str,
              half_life: float = 0.0) -> Iterator[tuple[int, int]]:
    """The third step: (id, size) of the agent's live entries in `VALUE_ORDER` (or by faded
    value with a `half_life`), read lazily: a put stops reading once it has room."""
    if half_life > 0:
        yield from _by_faded(conn, namespace, agent, keep, half_life)
        return
    cur = conn.execute(_BY_VALUE, (namespace, agent, keep))
    try:
        yield from cur
    finally:
        cur.close()


def _by_faded(conn: sqlite3.Connection, namespace: str, agent: str, keep: str,
              half_life: float, max_scores: int = MAX_SCORES) -> Iterator[tuple[int, int]]:
    """The agent's entries by faded value: merged by score, or sorted by a scan past
    `max_scores` distinct scores."""
    scores = [v for (v,) in conn.execute(_SCORES, (namespace, agent, max_scores + 1))]
    if len(scores) <= max_scores:
        yield from _merged(conn, namespace, agent, keep, half_life, scores)
        return
    conn.create_function("a2e_faded", 3, _faded, deterministic=True)
    limit, done = 16, 0
    while True:
        rows = conn.execute(_BY_FADED, (namespace, agent, keep, half_life, limit,
                                        half_life)).fetchall()
        yield from rows[done:]
        if len(rows) < limit:
            return
        done, limit = len(rows), limit * 8


def choose(conn: sqlite3.Connection, namespace: str, agent: str, keep: Sequence[int],
           fits: Callable[[int, int], bool], half_life: float = 0.0) -> list[int]:
    """The fewest rows, in eviction order, whose removal makes `fits(entries, bytes)` true
    (it says whether the put has room once that many entries and bytes of the agent's are
    gone); [] when even all of them would not (the caller checks that first, from the usage
    counters, so it never reads the agent's rows for nothing)."""
    chosen: list[int] = []
    n = b = 0
    seen: set[int] = set()
    kept = _ids.encode(list(keep)).decode()
    for step in (_superseded(conn, namespace, agent, kept),
                 _by_value(conn, namespace, agent, kept, half_life)):
        for id_, size in step:
            if id_ in seen:
                continue
            seen.add(id_)
            chosen.append(id_)
            n, b = n + 1, b + size
            if fits(n, b):
                return chosen
    return []


def evict(conn: sqlite3.Connection, namespace: str, agent: str, keep: Sequence[int],
          fits: Callable[[int, int], bool], now: float, half_life: float = 0.0) -> int:
    """Delete the rows `choose` picks (inside the caller's transaction; their keyword rows go
    when the caller's `Deferred` is flushed, as a forget's) and log them as one `evicted`
    change; how many."""
    ids = choose(conn, namespace, agent, keep, fits, half_life)
    if not ids:
        return 0
    rows = conn.execute(
        "DELETE FROM entries WHERE id IN (SELECT value FROM json_each(?))"
        " RETURNING tier, owner, key, tags", (_ids.encode(ids).decode(),)).fetchall()
    log_change(conn, namespace, "evicted",
               [removed_record(r[0], r[1], r[2].encode(), _tags.decode(r[3])) for r in rows], now)
    return len(rows)


class _Usage(Protocol):
    """The usage a put keeps (`host.store.sqlite.writes.Usage`)."""

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
    return evict(conn, namespace, agent, keep, fits, now, quotas.importance_half_life)
