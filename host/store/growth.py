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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from host.store.records import Quotas, StoreOutcome

__all__ = ["FRACTION_BUCKETS", "PutOutcomes", "QuotaReport", "TenantUsage", "UsageSummary",
           "evicted_by", "summary_of", "usage_sql"]

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
