"""History over the wire (`memory/history`), on both backends: an overwritten entry's earlier
contents stay readable, newest first, with when and why each was replaced; the history is
bounded by its retention, forgotten with its entry, and no other tenant reads it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.hosts import make_config, running_host

from host.app import Host
from host.client import MemoryClient, RemoteError
from protocol.clock import ShiftedClock

pytestmark = pytest.mark.all_backends

KEY = {"fact": "home"}


async def history(client: MemoryClient, key: dict[str, Any], tier: str = "",
                  limit: int = 10) -> list[dict[str, Any]]:
    """The versions `memory/history` returns for `key`."""
    return await client.history(key, tier=tier, limit=limit)


async def store_versions(client: MemoryClient, texts: list[str], tier: str = "semantic",
                         host: Host | None = None) -> None:
    """Store each text in turn under `KEY` (each store replaces the one before)."""
    for text in texts:
        await client.store([{"key": KEY, "content": text, "tier": tier}])
        if host is not None:
            host.clock.advance(1.0)  # type: ignore[attr-defined]


async def test_an_overwritten_entry_keeps_its_earlier_contents(client: MemoryClient, host: Host
                                                               ) -> None:
    """Three stores to one key: the history holds the current content, then the two it
    replaced, newest first, each marked `updated` with the time it was replaced."""
    await store_versions(client, ["I live in Lisbon.", "I live in Porto.", "I live in Faro."],
                         host=host)
    got = await history(client, KEY)
    assert [v["content"] for v in got] == ["I live in Faro.", "I live in Porto.",
                                           "I live in Lisbon."]
    assert [v["reason"] for v in got] == ["current", "updated", "updated"]
    assert "replaced_at" not in got[0]
    assert got[1]["replaced_at"] == got[0]["updated_at"]
    assert got[1]["replaced_at"] > got[2]["replaced_at"]
    assert all(v["key"] == KEY and v["tier"] == "semantic" for v in got)
    assert [v["content"] for v in await history(client, KEY, limit=2)] == [
        "I live in Faro.", "I live in Porto."]
    # the same content stored again is no new version
    await store_versions(client, ["I live in Faro."])
    assert len(await history(client, KEY)) == 3


async def test_history_is_bounded_by_its_retention(store_db: str, tmp_path: Path) -> None:
    """With `history.keep` 2, five stores to a key leave the current content and the two
    before it; past `history.days` the earlier versions are no longer returned."""
    config = make_config(store_db, history={"keep": 2, "days": 1.0})
    clock = ShiftedClock()
    async with running_host(config, clock=clock) as h:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{h.port}") as c:
            await c.init("ns", {"agent": "a1"})
            await store_versions(c, [f"Version {i} of the fact." for i in range(5)])
            got = await history(c, KEY)
            assert [v["content"] for v in got] == [
                "Version 4 of the fact.", "Version 3 of the fact.", "Version 2 of the fact."]
            clock.advance(86_400 + 10)
            assert [v["content"] for v in await history(c, KEY)] == ["Version 4 of the fact."]


async def test_no_other_tenant_reads_a_history(connect: Callable[..., Any], host: Host) -> None:
    """Another agent's episodic history, and another namespace's semantic history, read as
    nothing; the owner reads its own."""
    owner = await connect()
    await owner.init("ns", {"agent": "a1"})
    await store_versions(owner, ["My PIN is 1234.", "My PIN is 9876."], tier="episodic")
    await store_versions(owner, ["The team meets on Mondays.", "The team meets on Tuesdays."])
    other = await connect()
    await other.init("ns", {"agent": "a2"})
    assert [v["tier"] for v in await history(other, KEY)] == ["semantic"] * 2
    assert await history(other, KEY, tier="episodic") == []
    elsewhere = await connect()
    await elsewhere.init("ns2", {"agent": "a1"})
    assert await history(elsewhere, KEY) == []
    mine = await history(owner, KEY, tier="episodic")
    assert [v["content"] for v in mine] == ["My PIN is 9876.", "My PIN is 1234."]


async def test_a_forget_forgets_the_history(client: MemoryClient) -> None:
    """Forgetting an entry deletes its earlier versions with it: its history is empty, and
    a new entry under the key starts a history of its own."""
    await store_versions(client, ["My phone is a Pixel.", "My phone is an iPhone."])
    assert await client.forget(keys=[KEY], tier="semantic") == 1
    assert await history(client, KEY) == []
    await store_versions(client, ["My phone is a Fairphone."])
    assert [v["content"] for v in await history(client, KEY)] == ["My phone is a Fairphone."]


async def test_a_history_request_with_a_bad_key_is_refused(client: MemoryClient) -> None:
    """An empty key object is `invalid_message` naming the field `key`."""
    with pytest.raises(RemoteError) as err:
        await history(client, {})
    assert (err.value.code, err.value.detail.get("field")) == ("invalid_message", "key")
