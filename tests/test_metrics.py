"""`/healthz`, `/readyz` and `/metrics` over real HTTP on the WebSocket port."""

from __future__ import annotations

import time

import pytest
from support.http import get, metric_value

from host.app import Host
from host.client import MemoryClient, RemoteError
from host.ops.metrics import Metrics
from host.store.records import NewEntry, Scope

pytestmark = pytest.mark.all_transports("websocket")


async def test_health_and_readiness(host: Host) -> None:
    """/healthz answers while the process runs; /readyz turns 503 when the store is closed."""
    assert (await get(host.port, "/healthz"))[0] == 200
    assert (await get(host.port, "/readyz"))[0] == 200
    await host.store.close()
    status, _type, body = await get(host.port, "/readyz")
    assert status == 503 and "not ready" in body
    assert (await get(host.port, "/healthz"))[0] == 200


async def test_metrics_count_requests_errors_commits_entries_gc(
    host: Host, client: MemoryClient
) -> None:
    """Requests by type, errors by code, latency, commit batches, entries by tier, GC deletions
    and connections all show in /metrics as Prometheus text."""
    await client.store([{"key": {"k": i}, "content": i, "tier": "episodic"} for i in range(3)])
    await client.store([{"key": {"w": 1}, "content": 1, "tier": "working"},
                        {"key": {"s": 1}, "content": 1, "tier": "semantic"}])
    await client.retrieve(keys=[{"k": 1}])
    with pytest.raises(RemoteError):
        await client.retrieve(keys=[{"k": 1}], memory_id="no-such-session")
    old = time.time() - 100
    await host.store.put(Scope("ns", "a1"), [NewEntry(
        tier="episodic", key=b'{"old":1}', content=b"1", ttl=1, created_at=old, updated_at=old,
    )], time.time())
    assert await host.gc.collect_once() == 1

    status, ctype, text = await get(host.port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert metric_value(text, "a2e_requests_total", type="memory/store/req") == 2
    assert metric_value(text, "a2e_requests_total", type="memory/retrieve/req") == 2
    assert metric_value(text, "a2e_requests_total", type="memory/init/req") == 1
    assert metric_value(text, "a2e_errors_total", type="memory/retrieve/req",
                  code="memory_not_found") == 1
    assert metric_value(text, "a2e_request_duration_seconds_count", type="memory/store/req") == 2
    assert metric_value(text, "a2e_request_duration_seconds_bucket", type="memory/store/req",
                  le="+Inf") == 2
    assert metric_value(text, "a2e_store_commit_batch_size_count") >= 2
    assert metric_value(text, "a2e_store_commit_duration_seconds_count") >= 2
    assert metric_value(text, "a2e_entries", tier="episodic") == 3
    assert metric_value(text, "a2e_entries", tier="semantic") == 1
    assert metric_value(text, "a2e_entries", tier="working") == 1
    assert metric_value(text, "a2e_gc_deleted_entries_total") == 1
    assert metric_value(text, "a2e_connections_open", transport="websocket") == 1
    assert metric_value(text, "a2e_connections_open", transport="http") == 0
    assert metric_value(text, "a2e_connections_total") == 1
    assert metric_value(text, "a2e_requests_in_flight") == 0


async def test_hosts_in_one_process_keep_their_own_metrics(host: Host) -> None:
    """Two hosts in one process do not mix their figures (each has its own registry)."""
    other = Metrics()
    other.request("ping", "ok", 0.001)
    text = host.metrics.render().decode()
    assert metric_value(text, "a2e_requests_total", type="ping") == 0
