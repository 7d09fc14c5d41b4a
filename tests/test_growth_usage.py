"""Usage a tenant can see, on both backends: `/metrics` has a histogram of the tenants' usage
fractions (labels by scope only, whatever the tenants), `a2e-host stats` lists the fullest
tenants against their quotas, and the log warns once when a tenant reaches 80 % of one."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from support.hosts import make_config, run_cli, running_host, url_of
from support.http import get, metric_value

from host.client import MemoryClient

pytestmark = pytest.mark.all_backends  # tests taking `store_db` run on SQLite and PostgreSQL


def entry(k: int, tier: str = "episodic") -> dict[str, Any]:
    return {"key": {"k": k}, "content": "x", "tier": tier}


async def test_metrics_show_usage_fractions_without_tenant_labels(store_db: str) -> None:
    """An agent at 4 of 5 entries and its namespace at 4 of 100 are counted in the histogram's
    buckets of their scope; no label names a namespace or agent."""
    config = make_config(store_db, limits={"max_entries_per_agent": 5,
                                           "max_entries_per_namespace": 100})
    async with running_host(config) as host:
        async with await MemoryClient.connect(url_of(host)) as c:
            await c.init("secret-tenant", {"agent": "secret-agent"})
            await c.store([entry(k) for k in range(4)])
        status, _, text = await get(host.port, "/metrics")
        assert status == 200
        le = {"scope": "agent"}
        assert metric_value(text, "a2e_quota_usage_fraction_bucket", le="0.5", **le) == 0
        assert metric_value(text, "a2e_quota_usage_fraction_bucket", le="0.8", **le) == 1
        ns = {"scope": "namespace"}
        assert metric_value(text, "a2e_quota_usage_fraction_bucket", le="0.25", **ns) == 1
        assert metric_value(text, "a2e_quota_usage_fraction_count", **ns) == 1
        assert metric_value(text, "a2e_quota_usage_max") == pytest.approx(0.8)
        assert "secret" not in text


async def test_the_log_warns_once_at_80_percent(store_db: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """After a collection the log warns of an agent that reached 80 % of its quota, once:
    not again at the next collection while it stays there."""
    config = make_config(store_db, limits={"max_entries_per_agent": 10})
    async with running_host(config) as host:
        async with await MemoryClient.connect(url_of(host)) as c:
            await c.init("ns", {"agent": "a1"})
            await c.store([entry(k) for k in range(7)])
            with caplog.at_level(logging.WARNING, logger="a2e_host.usage"):
                await host.gc.collect_once()
                assert not caplog.records  # 70 %
                await c.store([entry(7)])
                await host.gc.collect_once()
                await host.gc.collect_once()
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1
        assert "agent 'a1' in namespace 'ns' is at 80 %" in warned[0]
        assert "8 of 10 entries" in warned[0]


async def test_stats_lists_the_fullest_tenants(store_db: str) -> None:
    """`a2e-host stats` lists each tenant against its quota, fullest first."""
    config = make_config(store_db, limits={"max_entries_per_agent": 4})
    async with running_host(config) as host:
        for agent, n in (("a1", 1), ("a2", 3)):
            async with await MemoryClient.connect(url_of(host)) as c:
                await c.init("ns", {"agent": agent})
                await c.store([entry(k) for k in range(n)])
    env = {"A2E_HOST_LIMITS_MAX_ENTRIES_PER_AGENT": "4"}
    out = run_cli("stats", "--db", store_db, "--json", env=env, text=True)
    assert out.returncode == 0, out.stderr
    usage = json.loads(out.stdout)["quota_usage"]
    assert [(u["agent"], u["entries"], u["max_entries"]) for u in usage[:2]] == [
        ("a2", 3, 4), ("a1", 1, 4)]
    text = run_cli("stats", "--db", store_db, env=env, text=True).stdout
    assert "ns / a2: 3 of 4 entries" in text
