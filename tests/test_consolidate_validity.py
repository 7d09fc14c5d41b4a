"""Consolidation on write reads the time of a fact, over the wire, on both backends: a
near-duplicate with other bounds is not skipped (its bounds are a told fact); a new entry that
does not hold at the write (a record of the past, a fact still to come) never retires one that
does, and a fact still to come is never retired; a current fact retires the ended one it
updates, whose bounds stay in history. Entries without bounds: test_consolidate."""

from __future__ import annotations

from typing import Any

import pytest
from support.consolidate import BANJO, UKULELE, fact, store

from host.app import Host
from host.client import MemoryClient

pytestmark = pytest.mark.all_backends

BOSTON = "I live in Boston."
# epoch seconds: long passed, and far ahead, at the time of every run of these tests
Y2020 = 1577836800.0  # 2020-01-01T00:00:00Z
Y2023 = 1672531200.0
Y2024 = 1704067200.0
Y2100 = 4102444800.0  # 2100-01-01T00:00:00Z


def bounded(key: str, text: str, **bounds: float) -> dict[str, Any]:
    return {**fact(key, text), **bounds}


async def live(client: MemoryClient) -> dict[str, dict[str, Any]]:
    """The live entries by key id, each with its bounds."""
    got = (await client.retrieve(limit=100)).entries
    return {e["key"]["id"]: e for e in got}


@pytest.mark.parametrize("bounds", [{"valid_until": Y2020}, {"valid_until": Y2100},
                                    {"valid_from": Y2100}, {"valid_from": Y2020}],
                         ids=["ended", "ends-later", "begins-later", "began"])
async def test_skip_stores_a_near_duplicate_with_other_bounds(
        client: MemoryClient, host: Host, bounds: dict[str, float]) -> None:
    """"I live in Boston." stored without bounds, then the same words with a `valid_until`
    (or a `valid_from`): the new bounds say something the stored entry does not (the fact
    ended, or will), so `skip` stores it, bounds and all; the first entry stays."""
    await store(client, [fact("a", BOSTON)])
    await host.search.drain()
    reply = await store(client, [bounded("b", BOSTON, **bounds)], "skip")
    assert reply.stored == [{"id": "b"}] and not reply.consolidated
    got = await live(client)
    assert sorted(got) == ["a", "b"]
    assert {k: got["b"].get(k) for k in bounds} == bounds
    assert "valid_until" not in got["a"] and "valid_from" not in got["a"]


async def test_skip_still_skips_the_same_fact_with_the_same_bounds(client: MemoryClient,
                                                                   host: Host) -> None:
    """The same words with the same bounds are the same told fact: skipped, as without
    bounds; and a stored bounded entry does not make its unbounded saying a duplicate."""
    await store(client, [bounded("a", BOSTON, valid_until=Y2020)])
    await host.search.drain()
    reply = await store(client, [bounded("b", BOSTON, valid_until=Y2020)], "skip")
    assert not reply.stored
    assert [(m["action"], m["existing"]) for m in reply.consolidated] == [
        ("skipped", {"id": "a"})]
    reply = await store(client, [fact("c", BOSTON)], "skip")
    assert reply.stored == [{"id": "c"}] and not reply.consolidated
    assert sorted(await live(client)) == ["a", "c"]


@pytest.mark.parametrize("stored, new", [
    ({}, {"valid_until": Y2020}),  # the past recorded after the present
    ({}, {"valid_from": Y2100}),  # a fact still to come
    ({"valid_from": Y2024}, {"valid_until": Y2023}),  # ends before the stored one begins
], ids=["past", "to-come", "earlier-window"])
@pytest.mark.parametrize("old_text, new_text", [(BOSTON, BOSTON), (UKULELE, BANJO)],
                         ids=["near-duplicate", "update"])
async def test_supersede_never_retires_what_holds_for_what_does_not(
        client: MemoryClient, host: Host, stored: dict[str, float], new: dict[str, float],
        old_text: str, new_text: str) -> None:
    """A new entry that does not hold at the write (its `valid_until` passed, its
    `valid_from` to come, its window before the stored one's) is stored beside the fact
    that holds, near-duplicate or update alike: nothing is retired, nothing merged."""
    await store(client, [bounded("old", old_text, **stored)])
    await host.search.drain()
    reply = await store(client, [bounded("new", new_text, **new)], "supersede")
    assert reply.stored == [{"id": "new"}] and not reply.consolidated
    got = await live(client)
    assert sorted(got) == ["new", "old"]
    assert {k: got["old"].get(k) for k in stored} == stored
    assert {k: got["new"].get(k) for k in new} == new
    assert [v["reason"] for v in await client.history({"id": "old"})] == ["current"]


@pytest.mark.parametrize("old_text, new_text", [(BOSTON, BOSTON), (UKULELE, BANJO)],
                         ids=["near-duplicate", "update"])
async def test_supersede_never_retires_a_fact_still_to_come(
        client: MemoryClient, host: Host, old_text: str, new_text: str) -> None:
    """A stored fact that has not begun (`valid_from` ahead) is not what a current entry
    replaces: it stays live."""
    await store(client, [bounded("old", old_text, valid_from=Y2100)])
    await host.search.drain()
    reply = await store(client, [fact("new", new_text)], "supersede")
    assert reply.stored == [{"id": "new"}] and not reply.consolidated
    assert sorted(await live(client)) == ["new", "old"]


@pytest.mark.parametrize("old_text, new_text", [(BOSTON, BOSTON), (UKULELE, BANJO)],
                         ids=["near-duplicate", "update"])
async def test_a_current_fact_retires_the_ended_one_with_its_bounds(
        client: MemoryClient, host: Host, old_text: str, new_text: str) -> None:
    """A current fact stored after one whose window ended before it began is an update: the
    ended one is retired, and its history version keeps its bounds."""
    await store(client, [bounded("old", old_text, valid_until=Y2020)])
    await host.search.drain()
    reply = await store(client, [bounded("new", new_text, valid_from=Y2020)], "supersede")
    assert [(m["action"], m["existing"]) for m in reply.consolidated] == [
        ("superseded", {"id": "old"})]
    got = await live(client)
    assert sorted(got) == ["new"] and got["new"]["valid_from"] == Y2020
    [was] = await client.history({"id": "old"})
    assert (was["content"], was["reason"], was["by"]) == (old_text, "superseded", {"id": "new"})
    assert was["valid_until"] == Y2020 and "valid_from" not in was


async def test_a_current_saying_with_an_end_to_come_supersedes_the_unbounded_one(
        client: MemoryClient, host: Host) -> None:
    """Both hold at the write, so they say the same present: the newer saying, with the end
    it tells, replaces the unbounded one (whose version history keeps), as a store of the same
    key replaces both bounds; a read after that end finds the fact over."""
    await store(client, [fact("a", BOSTON)])
    await host.search.drain()
    reply = await store(client, [bounded("b", BOSTON, valid_until=Y2100)], "supersede")
    assert [(m["action"], m["existing"]) for m in reply.consolidated] == [
        ("superseded", {"id": "a"})]
    got = await live(client)
    assert sorted(got) == ["b"] and got["b"]["valid_until"] == Y2100
    [was] = await client.history({"id": "a"})
    assert was["reason"] == "superseded" and "valid_until" not in was
