"""Prometheus metrics of one host, served as text at `GET /metrics`.

The per-message path pays for one counter increment and one histogram observation (about
1.5 us together, see docs/benchmarks.md); their label children are bound once per message type.
Everything that can be read at scrape time instead (open connections, in-flight requests,
entries by tier, GC deletions) is read then, by a collector, and costs the hot path nothing.

Each `Metrics` has its own registry, so several hosts in one process do not mix figures.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "EntryCounts", "HostGauges", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_EMBED_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(slots=True)
class HostGauges:
    """What the collector reads at scrape time; each callable is cheap or cached by its owner.

    `connections_total`, `in_flight`, `gc_deleted` return numbers; `connections_open` returns
    {transport: count} (`websocket`, `http`, `stdio`); `entries` returns {tier: count} (may be
    cached: counting a big table is not free); `embed_backlog` the entries waiting for a vector
    (as last counted; None: no embedder); `watches` (open, events sent, {reason: ended}) of
    the change streams (None: not shown); `embed_faults` the embedding worker's fault counters
    (`EmbeddingWorker.faults()`; None: no embedder); `vectors` the in-memory vector indexes' figures
    (`VectorIndexes.stats()`; None: no such indexes, e.g. PostgreSQL); `blas_threads` the
    threads numpy's OpenBLAS uses (`host.ops.threads.blas_threads`; None: not shown);
    `reads_dropped` the read times the read log dropped at its bound (`ReadLog.dropped`; None:
    the store keeps no read times).
    """

    connections_open: Callable[[], dict[str, int]]
    connections_total: Callable[[], int]
    in_flight: Callable[[], int]
    gc_deleted: Callable[[], int]
    entries: Callable[[], dict[str, int]]
    embed_backlog: Callable[[], int] | None = None
    watches: Callable[[], tuple[int, int, dict[str, int]]] | None = None
    vectors: Callable[[], dict[str, int]] | None = None
    blas_threads: Callable[[], int | None] | None = None
    embed_faults: Callable[[], dict[str, int]] | None = None
    reads_dropped: Callable[[], int] | None = None


# `VectorIndexes.stats()` keys shown: (metric, help, counter?); a key the stats lack is skipped
_VECTOR_FIGURES = (
    ("nbytes", "a2e_vector_index_bytes",
     "Bytes the loaded vector indexes hold (what vector_memory_bytes bounds).", False),
    ("budget_bytes", "a2e_vector_index_budget_bytes",
     "The vector indexes' memory budget (0: none).", False),
    ("keys", "a2e_vector_index_keys",
     "Vector index keys loaded (namespaces, client spaces).", False),
    ("ann_keys", "a2e_vector_index_ann_keys", "Loaded keys that are approximate indexes.", False),
    ("rows", "a2e_vector_index_rows", "Vector rows held in memory.", False),
    ("loading", "a2e_vector_index_loading", "Keys being loaded now.", False),
    ("promoting", "a2e_vector_index_promoting",
     "Keys whose approximate index is being built now.", False),
    ("loads", "a2e_vector_index_loads", "Keys loaded from the store since start.", True),
    ("evictions", "a2e_vector_index_evictions",
     "Keys evicted past the memory budget since start.", True),
    ("promotions", "a2e_vector_index_promotions",
     "Keys promoted to approximate indexes since start.", True),
    ("saved_hits", "a2e_vector_index_saved_hits",
     "Approximate indexes read back from their saved files since start.", True),
    ("let_go", "a2e_vector_index_let_go",
     "Keys let go as they were opened or written: their namespace past its share of the budget.",
     True),
)
# The embedding worker's faults (`EmbeddingWorker.faults()`): (metric, help), all counters
_EMBED_FAULTS = (
    ("failures", "a2e_embed_failures", "Embedding steps that failed as a whole (each retried)."),
    ("set_aside", "a2e_embed_set_aside",
     "Entries set aside since start: their text failed alone (retried later)."),
    ("refused", "a2e_embed_refused",
     "Namespaces' vector index writes refused since start (the others still embedded)."),
)


class _ScrapeCollector(Collector):
    def __init__(self, gauges: HostGauges) -> None:
        self.gauges = gauges

    def collect(self) -> Iterable[Metric]:
        g = self.gauges
        conns = GaugeMetricFamily("a2e_connections_open",
                                  "Connections (HTTP + SSE: sessions) open now, by transport.",
                                  labels=["transport"])
        for transport, n in sorted(g.connections_open().items()):
            conns.add_metric([transport], n)
        yield conns
        yield CounterMetricFamily(
            "a2e_connections", "Connections (and sessions) accepted since start.",
            value=g.connections_total(),
        )
        yield GaugeMetricFamily(
            "a2e_requests_in_flight", "Requests read but not yet answered.", value=g.in_flight()
        )
        yield CounterMetricFamily(
            "a2e_gc_deleted_entries", "Expired entries deleted by the garbage collector.",
            value=g.gc_deleted(),
        )
        entries = GaugeMetricFamily("a2e_entries", "Entries stored, by tier.", labels=["tier"])
        for tier, n in sorted(g.entries().items()):
            entries.add_metric([tier], n)
        yield entries
        if g.embed_backlog is not None:
            yield GaugeMetricFamily(
                "a2e_embed_backlog", "Stored entries waiting for their vector.",
                value=g.embed_backlog(),
            )
        if g.embed_faults is not None:
            faults = g.embed_faults()
            for key, name, doc in _EMBED_FAULTS:
                yield CounterMetricFamily(name, doc, value=faults.get(key, 0))

        if g.watches is not None:
            open_, events, ended = g.watches()
            yield GaugeMetricFamily("a2e_watches_open", "Change-stream watches open now.",
                                    value=open_)
            yield CounterMetricFamily(
                "a2e_watch_events", "memory/changed/event messages queued to watchers since start.",
                value=events)
            by_reason = CounterMetricFamily(
                "a2e_watches_ended", "Watches the host ended, by reason (lagging, shutdown, ...).",
                labels=["reason"])
            for reason, n in sorted(ended.items()):
                by_reason.add_metric([reason], n)
            yield by_reason
        if g.vectors is not None:
            stats = g.vectors()
            for key, name, doc, counter in _VECTOR_FIGURES:
                if key in stats:
                    family = CounterMetricFamily if counter else GaugeMetricFamily
                    yield family(name, doc, value=stats[key])
        if g.reads_dropped is not None:
            yield CounterMetricFamily(
                "a2e_read_times_dropped",
                "Reads whose time was not kept, since start: the read log was at its bound"
                " until a flush took it (fading importance and eviction do not see them).",
                value=g.reads_dropped())
        threads = g.blas_threads() if g.blas_threads is not None else None
        if threads is not None:
            yield GaugeMetricFamily(
                "a2e_blas_threads", "Threads numpy's OpenBLAS uses (OPENBLAS_NUM_THREADS).",
                value=threads)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # no describe: the registry must not collect at registration time


class Metrics:
    """The host's metric families. Call `request()` per answered request, `commit()` per commit."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Counter(
            "a2e_requests", "Requests answered, by message type.", ["type"],
            registry=self.registry,
        )
        self._errors = Counter(
            "a2e_errors", "Error replies, by message type and error code.", ["type", "code"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "a2e_request_duration_seconds",
            "Seconds from reading a request to sending its reply (writes include the commit).",
            ["type"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self._batch = Histogram(
            "a2e_store_commit_batch_size", "Write operations in one group commit.",
            buckets=_BATCH_BUCKETS, registry=self.registry,
        )
        self._commit = Histogram(
            "a2e_store_commit_duration_seconds", "Seconds one group commit took.",
            buckets=_COMMIT_BUCKETS, registry=self.registry,
        )
        self._embedded = Counter(
            "a2e_embedded", "Stored entries embedded by the background worker.",
            registry=self.registry,
        )
        self._embed_seconds = Histogram(
            "a2e_embed_batch_duration_seconds",
            "Seconds one embedding batch of the background worker took.",
            buckets=_EMBED_BUCKETS, registry=self.registry,
        )
        self._children: dict[str, tuple[Any, Any]] = {}
        self._error_children: dict[tuple[str, str], Any] = {}

    def request(self, msg_type: str, code: str, seconds: float) -> None:
        """Count one answered request: `code` is "ok" or the error code of its reply."""
        child = self._children.get(msg_type)
        if child is None:
            child = self._children[msg_type] = (
                self._requests.labels(msg_type), self._latency.labels(msg_type)
            )
        child[0].inc()
        child[1].observe(seconds)
        if code != "ok":
            err = self._error_children.get((msg_type, code))
            if err is None:
                err = self._error_children[(msg_type, code)] = self._errors.labels(msg_type, code)
            err.inc()

    def commit(self, operations: int, seconds: float) -> None:
        """Record one group commit (the `Writer` observer; runs on the writer thread)."""
        self._batch.observe(operations)
        self._commit.observe(seconds)

    def latency_snapshot(self) -> dict[str, tuple[int, ...]]:
        """{message type: cumulative request counts per latency bucket, `LATENCY_BUCKETS`
        then +Inf (the last is every request answered)} as of now: the memory browser's Health
        page samples it for requests a second and p99."""
        out: dict[str, list[int]] = {}
        for family in self._latency.collect():
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    out.setdefault(s.labels["type"], []).append(int(s.value))
        return {t: tuple(v) for t, v in out.items()}

    def embedded(self, entries: int, seconds: float) -> None:
        """Record one batch of the embedding worker."""
        self._embedded.inc(entries)
        self._embed_seconds.observe(seconds)

    def add_gauges(self, gauges: HostGauges) -> None:
        """Read `gauges` at each scrape."""
        self.registry.register(_ScrapeCollector(gauges))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class EntryCounts:
    """Entries by tier, fetched at most every `max_age` seconds (counting scans the table).

    `await refresh()` before a scrape; calling the object returns the last counts.
    """

    def __init__(
        self, fetch: Callable[[float], Awaitable[dict[str, int]]], max_age: float = 15.0
    ) -> None:
        self._fetch = fetch
        self._max_age = max_age
        self._value: dict[str, int] = {}
        self._at = float("-inf")

    async def refresh(self) -> None:
        """Fetch the counts again if the last ones are older than `max_age`."""
        t = time.monotonic()
        if t - self._at >= self._max_age:
            self._value = await self._fetch(time.time())
            self._at = t

    def __call__(self) -> dict[str, int]:
        return dict(self._value)
