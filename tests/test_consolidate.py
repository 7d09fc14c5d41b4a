"""Consolidation on write over the wire, on both backends: asked for, a store skips or
supersedes a near-duplicate of what is stored and says so in its reply; each merge is a change
of its own that a watch replays; a superseded entry's content stays readable through history;
similar but different facts never merge; without it, every entry is stored."""

from __future__ import annotations

from typing import Any

import pytest
from support.consolidate import BANJO, CONCISE, CONCISE_AGAIN, UKULELE, fact, store

from host.app import Host
from host.client import MemoryClient, RemoteError
from protocol.messages import MemoryChangedEvent

pytestmark = pytest.mark.all_backends

# pairs alike in words but not in what they say: none may ever merge with the other
DIFFERENT = [
    ("I'm allergic to peanuts.", "I'm allergic to penicillin."),
    ("My daughter Mia starts school in September.", "My partner Sam starts work in September."),
    ("Project Atlas is due on 3 March.", "Project Borealis is due on 21 April."),
]


async def keys_stored(client: MemoryClient) -> list[str]:
    got = (await client.retrieve(limit=100)).entries
    return sorted(e["key"]["id"] for e in got)


async def test_skip_stores_nothing_for_a_near_duplicate(client: MemoryClient, host: Host
                                                       ) -> None:
    """With `skip`, a paraphrase of a stored fact is not stored: the reply lists it under
    `consolidated` (skipped, the existing key, the similarity) and not under `stored`."""
    await store(client, [fact("a", CONCISE)])
    await host.search.drain()
    reply = await store(client, [fact("b", CONCISE_AGAIN), fact("c", UKULELE)], "skip")
    assert reply.stored == [{"id": "c"}]
    [merge] = reply.consolidated
    assert (merge["key"], merge["action"], merge["existing"]) == ({"id": "b"}, "skipped", {"id": "a"})
    assert 0.8 <= merge["similarity"] <= 1.0
    assert await keys_stored(client) == ["a", "c"]


async def test_supersede_retires_the_older_entry_into_history(client: MemoryClient, host: Host
                                                              ) -> None:
    """With `supersede`, an update of a stored fact is stored and the fact retired: gone from
    reads, its content readable through `memory/history` as superseded by the new key."""
    await store(client, [fact("old", UKULELE), fact("other", CONCISE)])
    await host.search.drain()
    reply = await store(client, [fact("new", BANJO)], "supersede")
    assert reply.stored == [{"id": "new"}]
    [merge] = reply.consolidated
    assert (merge["key"], merge["action"], merge["existing"]) == ({"id": "new"}, "superseded",
                                                         {"id": "old"})
    assert await keys_stored(client) == ["new", "other"]
    [was] = await client.history({"id": "old"})
    assert (was["content"], was["reason"], was["by"]) == (UKULELE, "superseded", {"id": "new"})
    assert was["similarity"] == merge["similarity"]
    # undo: the version stored again under its key
    await client.store([fact("old", was["content"])])
    assert await keys_stored(client) == ["new", "old", "other"]


async def test_a_replay_of_the_change_log_shows_each_merge(client: MemoryClient, host: Host
                                                           ) -> None:
    """A watch from the start of the log replays a merge as a `consolidated` change of its own
    after the store's: the existing key, what was done, the new key and the similarity."""
    await store(client, [fact("old", UKULELE), fact("a", CONCISE)])
    await host.search.drain()
    await store(client, [fact("new", BANJO)], "supersede")
    await store(client, [fact("b", CONCISE_AGAIN)], "skip")
    await client.watch(since="0")
    ops: list[tuple[str, list[dict[str, Any]]]] = []
    while len(ops) < 4:
        event = await client.next_event()
        assert isinstance(event, MemoryChangedEvent)
        ops.append((event.op, event.entries))
    assert [op for op, _ in ops] == ["stored", "stored", "consolidated", "consolidated"]
    superseded, skipped = ops[2][1][0], ops[3][1][0]
    assert (superseded["key"], superseded["action"], superseded["with"]) == (
        {"id": "old"}, "superseded", {"id": "new"})
    assert (skipped["key"], skipped["action"], skipped["with"]) == (
        {"id": "a"}, "skipped", {"id": "b"})
    assert skipped["similarity"] >= 0.8 and superseded["similarity"] >= 0.4


@pytest.mark.parametrize("policy", ["skip", "supersede"])
async def test_similar_but_different_facts_never_merge(client: MemoryClient, host: Host,
                                                       policy: str) -> None:
    """Facts alike in words but not in what they say (peanuts and penicillin, a daughter and a
    partner, two projects' deadlines) are all stored, whatever the policy."""
    for i, (first, second) in enumerate(DIFFERENT):
        await store(client, [fact(f"{i}a", first)])
        await host.search.drain()
        reply = await store(client, [fact(f"{i}b", second)], policy)
        assert reply.stored == [{"id": f"{i}b"}]
        assert not reply.consolidated
    assert len(await keys_stored(client)) == 2 * len(DIFFERENT)


async def test_without_consolidation_every_entry_is_stored(client: MemoryClient, host: Host
                                                           ) -> None:
    """By default (and with `keep`) the same fact under two keys is stored twice and the reply
    says nothing of consolidation."""
    await store(client, [fact("a", CONCISE)])
    await host.search.drain()
    for key, policy in (("b", ""), ("c", "keep")):
        reply = await store(client, [fact(key, CONCISE)], policy)
        assert reply.stored == [{"id": key}]
        assert not reply.consolidated
    assert await keys_stored(client) == ["a", "b", "c"]


async def test_another_agents_entries_are_never_merged_with(connect: Any, host: Host) -> None:
    """An agent's episodic entry is judged against its own episodic entries only: the same
    fact in another agent's episodic tier is neither skipped nor superseded."""
    first = await connect()
    await first.init("ns", {"agent": "a1"})
    await store(first, [fact("a", CONCISE, "episodic")])
    await host.search.drain()
    for agent, policy in (("a2", "skip"), ("a3", "supersede")):
        second = await connect()
        await second.init("ns", {"agent": agent})
        reply = await store(second, [fact(policy, CONCISE, "episodic")], policy)
        assert reply.stored == [{"id": policy}] and not reply.consolidated
    assert [e["key"] for e in (await first.retrieve(tier="episodic")).entries] == [{"id": "a"}]


async def test_an_unknown_policy_is_refused(client: MemoryClient) -> None:
    """A `consolidate` that is no policy is `invalid_message` and stores nothing."""
    with pytest.raises(RemoteError) as err:
        await store(client, [fact("a", CONCISE)], "merge")
    assert err.value.code == "invalid_message"
    assert await keys_stored(client) == []


@pytest.mark.all_transports
async def test_a_supersede_and_its_history_over_every_transport(client: MemoryClient,
                                                                  host: Host) -> None:
    """Over each transport (both WebSocket libraries, HTTP + SSE, stdio) a supersede is
    acknowledged and the retired entry reads back through `memory/history`."""
    await store(client, [fact("old", UKULELE)])
    await host.search.drain()
    reply = await store(client, [fact("new", BANJO)], "supersede")
    assert [m["existing"] for m in reply.consolidated] == [{"id": "old"}]
    [was] = await client.history({"id": "old"})
    assert (was["content"], was["reason"], was["by"]) == (UKULELE, "superseded", {"id": "new"})
