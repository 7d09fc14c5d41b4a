"""Bounded growth, on every backend (docs/growth.md): what a put that evicted says, and how
full each tenant is.

With `limits.on_full` "evict" a put that would pass a quota first removes entries of the
storing agent (`host.store.sqlite.evict`, `a2e_put_entries` on PostgreSQL). Its outcomes are
then a `PutOutcomes`: the list `EntryStore.put` returns, with how many entries went, which the
store reply carries (`evicted`).

A tenant's usage is read from the quota counters (`usage` on SQLite, `a2e_usage` on
PostgreSQL: one row a namespace, agent "", and one a (namespace, writing agent)), the rows the
quotas are checked against: `usage_sql` is the one query both backends run, in SQL, so a scrape
holds a few rows whatever the number of tenants."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from host.store.records import PERSISTENT_TIERS, Quotas, StoredEntry, StoreOutcome

log = logging.getLogger("a2e_host.growth")

__all__ = ["FRACTION_BUCKETS", "PutOutcomes", "QuotaReport", "ReadLog", "ReadTimes",
           "TenantUsage", "UsageOf", "UsageSummary", "evicted_by", "summary_of", "usage_sql"]

# the upper bounds of the usage-fraction histogram (the share of its most used quota, entries
# or bytes, a tenant has taken), the last one the quota itself
FRACTION_BUCKETS: tuple[float, ...] = (0.25, 0.5, 0.8, 0.9, 1.0)


class PutOutcomes(list[StoreOutcome]):
    """The outcomes of a put, one an entry, and the entries it evicted to make room."""

    __slots__ = ("evicted",)

    def __init__(self, outcomes: list[StoreOutcome], evicted: int = 0) -> None:
        super().__init__(outcomes)
        self.evicted = evicted


def evicted_by(outcomes: object) -> int:
    """The entries a put evicted, from what `EntryStore.put` returned (0: none, or a store
    that never evicts)."""
    return outcomes.evicted if isinstance(outcomes, PutOutcomes) else 0


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """What one tenant holds against its quotas: a namespace (`agent` "") or an agent in it.
    `fraction` is the share of the more used of its two quotas (entries, bytes)."""

    namespace: str
    agent: str
    entries: int
    bytes: int
    max_entries: int
    max_bytes: int
    fraction: float


@dataclass(frozen=True, slots=True)
class UsageSummary:
    """Tenants by usage fraction, for each scope ("namespace", "agent"): `buckets[scope][i]`
    tenants at most `FRACTION_BUCKETS[i]` full (cumulative), `counts` all of them, `sums`
    their fractions added; and the `top` most used tenants, fullest first."""

    buckets: dict[str, list[int]]
    counts: dict[str, int]
    sums: dict[str, float]
    top: list[TenantUsage]


def usage_sql(mark: Callable[[int], str], greatest: str) -> tuple[str, str]:
    """The histogram query and the top query over the quota counters, in a dialect: `mark(i)`
    the i-th parameter (1-4: the namespace entry and byte quotas, the agent's; 5: the top's
    size), `greatest` the two-argument maximum. The histogram's rows are (namespace row?,
    bucket index, tenants, fractions added); the top's (namespace, agent, entries, bytes)."""
    q = [mark(i) for i in range(1, 6)]
    fraction = (f"CASE WHEN agent = '' THEN {greatest}(entries * 1.0 / {q[0]}, bytes * 1.0 / {q[1]})"
                f" ELSE {greatest}(entries * 1.0 / {q[2]}, bytes * 1.0 / {q[3]}) END")
    bucket = "CASE " + " ".join(f"WHEN f <= {b} THEN {i}" for i, b in enumerate(
        FRACTION_BUCKETS)) + f" ELSE {len(FRACTION_BUCKETS)} END"
    rows = f"SELECT namespace, agent, entries, bytes, {fraction} AS f FROM {{table}} WHERE entries > 0"
    histogram = (f"SELECT agent = '' AS ns, {bucket} AS b, count(*), sum(f) FROM ({rows}) u"
                 " GROUP BY 1, 2")
    top = (f"SELECT namespace, agent, entries, bytes FROM ({rows}) u"
           f" ORDER BY f DESC, namespace, agent LIMIT {q[4]}")
    return histogram, top


def summary_of(quotas: Quotas, histogram: Sequence[Sequence[object]],
               top: Sequence[Sequence[object]]) -> UsageSummary:
    """The `UsageSummary` of the rows of `usage_sql`'s two queries."""
    n = len(FRACTION_BUCKETS)
    per = {"namespace": [0] * (n + 1), "agent": [0] * (n + 1)}
    sums = {"namespace": 0.0, "agent": 0.0}
    for ns, b, count, total in histogram:
        scope = "namespace" if ns else "agent"
        per[scope][int(b)] += int(count)  # type: ignore[call-overload]
        sums[scope] += float(total)  # type: ignore[arg-type]
    buckets = {scope: [sum(c[:i + 1]) for i in range(n)] for scope, c in per.items()}
    tenants = []
    for namespace, agent, entries, size in top:
        me, mb = ((quotas.max_entries_per_namespace, quotas.max_bytes_per_namespace) if agent == ""
                  else (quotas.max_entries_per_agent, quotas.max_bytes_per_agent))
        e, b = int(entries), int(size)  # type: ignore[call-overload]
        tenants.append(TenantUsage(str(namespace), str(agent), e, b, me, mb,
                                   max(e / me, b / mb)))
    return UsageSummary(buckets, {s: sum(c) for s, c in per.items()}, sums, tenants)


@runtime_checkable
class QuotaReport(Protocol):
    """Optional capability of a store or a `StoreAdmin`: it reads how full its tenants are
    (both backends' stores and admins; `host.ops.usage`)."""

    async def quota_usage(self, quotas: Quotas, top: int) -> UsageSummary | None:
        """Tenants by usage fraction and the `top` fullest (None: no quota counters to read,
        e.g. an in-memory database)."""


@runtime_checkable
class UsageOf(Protocol):
    """Optional capability of a store: what tenants hold, read from the quota counters (both
    backends; the `memory/usage` request, the memory browser)."""

    async def usage_of(self, namespace: str, agent: str) -> tuple[tuple[int, int], tuple[int, int]]:
        """((entries, bytes) of `namespace`, (entries, bytes) `agent` wrote last in it)."""

    async def agents_usage(self, namespaces: Sequence[str]
                           ) -> dict[str, dict[str, tuple[int, int]]]:
        """(entries, bytes) of each agent holding entries in each of `namespaces`, by
        namespace and agent (the memory browser's Namespaces page)."""


# one entry's read to record: (namespace, tier, owner, key, when)
Read = tuple[str, str, str, bytes, float]


@runtime_checkable
class ReadTimes(Protocol):
    """Optional capability of a store: it keeps when each entry was last read over the wire
    (both backends: `read_at`), for eviction's order and importance that fades."""

    def record_reads(self, reads: Sequence[Read]) -> Awaitable[int]:
        """Move the read time of each entry of `reads` forward to its `when` (never back; an
        entry gone meanwhile is skipped); resolves after the commit."""

    async def read_times(self, ids: Sequence[int]) -> dict[int, float]:
        """The last read time of each of `ids` (row ids) that was ever read."""


class ReadLog:
    """The reads of a host, coalesced in memory and written by the store in batches: a read
    never waits for a write (docs/growth.md, "Importance that fades").

    `note` records the entries a retrieve returned (the latest time an entry); the first note
    after a flush schedules the next one `interval` seconds later, and one that fills the log
    (`max_pending` entries, or `max_bytes` of their keys) starts it at once: a log at its bound
    drops further reads until the flush took them (counted in `dropped`). A flush writes `BATCH` entries a write. A crash
    loses the read times noted since the last flush, never an entry; `close` flushes the rest."""

    BATCH = 1000

    def __init__(self, store: object, interval: float = 2.0, max_pending: int = 10_000,
                 max_bytes: int = 4 << 20, wanted: Callable[[], bool] = lambda: True) -> None:
        self.store = store if isinstance(store, ReadTimes) else None
        self.wanted = wanted  # whether a read is noted now (the settings that use read times)
        self.interval = interval
        self.max_pending = max_pending
        self.max_bytes = max_bytes
        self.dropped = 0
        self.bytes = 0  # the namespaces' and keys' bytes the log holds
        self._pending: dict[tuple[str, str, str, bytes], float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        """Whether the store keeps read times at all."""
        return self.store is not None

    def note(self, namespace: str, entries: Iterable[StoredEntry], when: float) -> None:
        """Record that `entries` (of `namespace`) were read at `when`; working entries are not
        persisted and not recorded; nothing while `wanted()` is false."""
        if self.store is None or not self.wanted():
            return
        pending = self._pending
        ns_size = len(namespace.encode())
        for e in entries:
            if e.tier not in PERSISTENT_TIERS:
                continue
            k = (namespace, e.tier, e.owner, e.key)
            t = pending.get(k)
            if t is not None:
                if when > t:
                    pending[k] = when
                continue
            size = ns_size + len(e.key)
            if len(pending) < self.max_pending and self.bytes + size <= self.max_bytes:
                pending[k] = when
                self.bytes += size
            else:
                self.dropped += 1
        if not pending or self._flushing is not None:
            return
        if len(pending) >= self.max_pending or self.bytes >= self.max_bytes // 2:
            self._start()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._start)

    def pending(self, namespace: str, entries: Iterable[StoredEntry]) -> dict[int, float]:
        """The reads of `entries` noted and not yet flushed, by row id."""
        out: dict[int, float] = {}
        if self._pending:
            for e in entries:
                t = self._pending.get((namespace, e.tier, e.owner, e.key))
                if t is not None and e.id is not None:
                    out[e.id] = t
        return out

    async def last_read(self, namespace: str, entries: Sequence[StoredEntry]) -> dict[int, float]:
        """The last read time of each of `entries` read before (stored or still pending), by
        row id."""
        if self.store is None:
            return {}
        times = await self.store.read_times([e.id for e in entries if e.id is not None])
        for i, t in self.pending(namespace, entries).items():
            if t > times.get(i, 0.0):
                times[i] = t
        return times

    def _start(self) -> None:
        self._timer = None
        if self._flushing is None and self._pending:
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    async def flush(self) -> None:
        """Write what is noted now (after the flush under way, if one is)."""
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        await self._write()

    async def _flush(self) -> None:
        try:
            await self._write()
        finally:
            self._flushing = None
        if self._pending and self._timer is None:  # noted while this flush ran
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._start)

    async def _write(self) -> None:
        taken, self._pending, self.bytes = self._pending, {}, 0
        if self.store is None or not taken:
            return
        reads = [(*k, t) for k, t in taken.items()]
        for i in range(0, len(reads), self.BATCH):
            try:
                await self.store.record_reads(reads[i:i + self.BATCH])
            except Exception as exc:  # read times only: the entries are untouched
                log.warning("%d read times not recorded: %s", len(reads) - i, exc)
                return

    async def close(self) -> None:
        """Write what is noted (before the store closes); later notes schedule nothing."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.flush()
        self.store = None
