"""The time of a fact in history and change events, on both backends: a `memory/history`
version and a `memory/changed` entry carry the bounds their entry had (`valid_from` /
`valid_until`, epoch seconds), each only when it had it, so replies about entries without
bounds are as before; a replay of the change log shows them as the live events do."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.consolidate import BANJO, CONCISE, UKULELE, fact, store
from support.watch import changed, session

from host.app import Host
from host.client import MemoryClient

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]

MAR = 1_772_323_200.0  # 2026-03-01T00:00:00Z
KEY = {"fact": "home"}


def bounds(e: dict[str, Any]) -> tuple[Any, Any]:
    """An entry's bounds as its JSON has them (None: the field is absent, never null)."""
    assert e.get("valid_from", 0) is not None and e.get("valid_until", 0) is not None
    return e.get("valid_from"), e.get("valid_until")


async def test_history_versions_carry_the_bounds_they_had(client: MemoryClient, host: Host
                                                          ) -> None:
    """Three stores to one key, with a window, another, then none: each version shows the
    bounds it was stored with, and the current one, stored without, shows none."""
    for text, window in [("I live in Boston.", {"valid_until": "2026-03-01T01:00:00+01:00"}),
                         ("I live in Denver.", {"valid_from": MAR}),
                         ("I live in Denver, downtown.", {})]:
        reply = await client.store([{"key": KEY, "content": text, "tier": "semantic",
                                     **window}])
        assert not reply.errors
        host.clock.advance(1.0)  # type: ignore[attr-defined]
    got = await client.history(KEY)
    assert [v["content"] for v in got] == ["I live in Denver, downtown.", "I live in Denver.",
                                           "I live in Boston."]
    assert [bounds(v) for v in got] == [(None, None), (MAR, None), (None, MAR)]
    assert set(got[0]) == {"key", "content", "tier", "tags", "source", "score", "created_at",
                           "updated_at", "reason"}  # a version without bounds: as before


async def test_a_superseded_version_keeps_its_bounds(client: MemoryClient, host: Host) -> None:
    """An entry consolidation retires keeps its bounds in the history."""
    await store(client, [{**fact("old", UKULELE), "valid_until": MAR}, fact("other", CONCISE)])
    await host.search.drain()
    reply = await store(client, [{**fact("new", BANJO), "valid_from": MAR}], "supersede")
    assert [m["action"] for m in reply.consolidated] == ["superseded"]
    [was] = await client.history({"id": "old"})
    assert (was["reason"], bounds(was)) == ("superseded", (None, MAR))
    [now] = await client.history({"id": "new"})
    assert (now["reason"], bounds(now)) == ("current", (MAR, None))


async def test_change_events_carry_the_bounds(connect: Callable[..., Any]) -> None:
    """A `stored` event's entries are as a retrieve returns them, bounds included, each only
    when the entry has it; a replay of the log from its start shows the same entries; a
    working entry's event carries its bounds too."""
    watcher, writer = await session(connect, "a1"), await session(connect, "a2")
    await watcher.watch()
    entries = [
        {"key": {"k": 1}, "content": "Boston", "tier": "semantic", "valid_until": MAR},
        {"key": {"k": 2}, "content": "Denver", "tier": "semantic",
         "valid_from": "2026-03-01T00:00:00Z", "valid_until": MAR + 0.5},
        {"key": {"k": 3}, "content": "no time", "tier": "semantic"},
    ]
    assert not (await writer.store(entries)).errors
    ev = await changed(watcher)
    got = await writer.retrieve(keys=[e["key"] for e in entries], tier="semantic")
    by_key = {json.dumps(e["key"]): e for e in got.entries}
    assert {json.dumps(e["key"]): bounds(e) for e in ev.entries} == {
        '{"k": 1}': (None, MAR), '{"k": 2}': (MAR, MAR + 0.5), '{"k": 3}': (None, None)}
    for e in ev.entries:
        assert e == by_key[json.dumps(e["key"])]
    replay = await session(connect, "a3")
    await replay.watch(since="0")
    again = await changed(replay)
    assert again.op == "stored" and again.entries == ev.entries
    await watcher.store([{"key": {"w": 1}, "content": "draft", "tier": "working",
                          "valid_from": MAR}])
    ev = await changed(watcher)
    assert ev.entries[0]["tier"] == "working" and bounds(ev.entries[0]) == (MAR, None)
