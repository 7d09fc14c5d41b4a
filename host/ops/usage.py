"""Usage a tenant can see (docs/growth.md): how full each namespace and agent is against its
quotas, on `/metrics`, in `a2e-host stats` and as a warning in the log at 80 %.

`/metrics` shows a histogram of the tenants' usage fractions by scope (namespace, agent) and
the highest fraction: a few series whatever the number of tenants (never a label a tenant
names). `stats` lists the fullest tenants by name. The log warns once when a tenant reaches
`WARN_AT` of a quota, read after each collection of expired entries (`gc.interval`), and
again only after it went back under it.

Both backends keep the quota counters the puts check (`host.store.growth`); this module reads
them through whichever store or `StoreAdmin` it is given."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from host.store.growth import FRACTION_BUCKETS, QuotaReport, TenantUsage, UsageSummary
from host.store.records import Quotas

__all__ = ["WARN_AT", "QuotaUsage", "read_usage"]

log = logging.getLogger("a2e_host.usage")

WARN_AT = 0.8  # the share of a quota at which the log warns
WATCHED = 100  # the fullest tenants the warning reads a time (the rest are under them)


async def read_usage(store: object, quotas: Quotas, top: int) -> UsageSummary | None:
    """The usage summary of a store or `StoreAdmin` that reads one (`QuotaReport`: both
    backends' stores and admins), else None."""
    if isinstance(store, QuotaReport):
        return await store.quota_usage(quotas, top)
    return None


class QuotaUsage:
    """The host's view of its tenants' usage: `refresh()` before a scrape (read at most every
    `max_age` seconds), `check(t)` after a collection (the warning), `collector()` for the
    metrics registry."""

    def __init__(self, store: Any, quotas: Callable[[], Quotas], max_age: float = 15.0) -> None:
        self.store = store
        self.quotas = quotas
        self.max_age = max_age
        self.last: UsageSummary | None = None
        self._at = float("-inf")
        self._warned: set[tuple[str, str]] = set()  # tenants at WARN_AT or more, warned of
        self.warned: list[TenantUsage] = []  # those the last check warned of

    async def refresh(self) -> None:
        """Read the usage again if the last reading is older than `max_age`."""
        t = time.monotonic()
        if t - self._at >= self.max_age:
            self.last = await read_usage(self.store, self.quotas(), WATCHED)
            self._at = t

    async def check(self, _t: float = 0.0) -> None:
        """Read the usage now and warn of each tenant that reached `WARN_AT` of a quota since
        the last check (`warned`: those of this check)."""
        self.last = await read_usage(self.store, self.quotas(), WATCHED)
        self._at = time.monotonic()
        if self.last is None:
            return
        full = {(u.namespace, u.agent): u for u in self.last.top if u.fraction >= WARN_AT}
        new = self.warned = [u for k, u in full.items() if k not in self._warned]
        self._warned = set(full)
        for u in new:
            who = (f"namespace {u.namespace!r}" if not u.agent
                   else f"agent {u.agent!r} in namespace {u.namespace!r}")
            log.warning("%s is at %.0f %% of its quota: %d of %d entries, %d of %d bytes"
                        " (limits.on_full decides what a store past it does)", who,
                        100 * u.fraction, u.entries, u.max_entries, u.bytes, u.max_bytes)

    def collector(self) -> Collector:
        """A collector of the last reading for the metrics registry."""
        return _UsageCollector(self)


class _UsageCollector(Collector):
    def __init__(self, usage: QuotaUsage) -> None:
        self.usage = usage

    def collect(self) -> Iterable[Metric]:
        s = self.usage.last
        if s is None:
            return
        hist = HistogramMetricFamily(
            "a2e_quota_usage_fraction", "Tenants (namespaces; agents in a namespace) by the"
            " share of their fuller quota (entries or bytes) they hold.", labels=["scope"])
        for scope in ("namespace", "agent"):
            buckets = [(str(b), float(n)) for b, n in zip(FRACTION_BUCKETS, s.buckets[scope],
                                                          strict=True)]
            hist.add_metric([scope], [*buckets, ("+Inf", float(s.counts[scope]))],
                            sum_value=s.sums[scope])
        yield hist
        yield GaugeMetricFamily("a2e_quota_usage_max", "The highest share of a quota any"
                                " tenant holds.", value=s.top[0].fraction if s.top else 0.0)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # no describe: the registry must not collect at registration time
