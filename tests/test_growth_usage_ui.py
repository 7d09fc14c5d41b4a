"""The memory browser's Namespaces page shows each agent's use of its own quota beside its
entries (the fuller of entries and bytes), read from the quota counters, on both backends."""

from __future__ import annotations

import re

import pytest
from support.hosts import make_config, running_host, url_of
from uikit import UiClient, text

from host.client import MemoryClient

pytestmark = pytest.mark.all_backends  # tests taking `store_db` run on SQLite and PostgreSQL


async def test_namespaces_page_gives_each_agents_share_of_its_quota(store_db: str) -> None:
    """Under a quota of 10 entries an agent, a1 with 3 entries shows "quota 30%" and a2 with 1
    "quota 10%", in its own namespace's row only; the title gives entries and bytes."""
    config = make_config(store_db, search={"embedder": "none"},
                         limits={"max_entries_per_agent": 10})
    async with running_host(config) as host:
        for agent, ns, n in (("a1", "proj", 3), ("a2", "proj", 1), ("a3", "else", 6)):
            async with await MemoryClient.connect(url_of(host)) as c:
                await c.init(ns, {"agent": agent})
                await c.store([{"key": {"k": i}, "content": "x", "tier": "episodic"}
                               for i in range(n)])
        assert host.ui is not None
        page = text(await UiClient(host.ui).get("/ui/namespaces"))
        row = page.split('href="/ui/entries?ns=proj">proj</a>', 1)[1].split("</tr>", 1)[0]
        agents = re.sub(r"<[^>]+>", "", row.split('data-label="agents">', 1)[1].split("</td>")[0])
        assert agents == "a1 (3 epi; quota 30%), a2 (1 epi; quota 10%)"
        assert 'title="3 of 10 entries, ' in row
        other = page.split('href="/ui/entries?ns=else">else</a>', 1)[1].split("</tr>", 1)[0]
        assert "a3 (6 epi; quota 60%)" in re.sub(r"<[^>]+>", "", other)
