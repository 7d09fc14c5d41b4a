"""The isolation matrix over real sockets: two agents, two namespaces, three tiers, every read
and forget path; each session sees exactly what its tier rules allow, never another's data.

Five sessions write one entry per tier: (a1, n1) on two connections, (a2, n1), (a1, n2),
(a2, n2). An entry of session W in tier T is visible to session O when
working: O is W; episodic: same agent and namespace; semantic: same namespace.
The matrix runs with authentication on (identity from tokens) and off (identity from scope).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from authkit import connect, issue, running
from support.isolation import LAYOUT, TIERS, Session, key, visible

from host.client import MemoryClient, RemoteError

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]

@pytest.fixture(params=["tokens", "open"])
async def world(request: pytest.FixtureRequest, store_db: str) -> AsyncIterator[list[Session]]:
    """The five sessions, each having written its three entries."""
    tokens = {a: issue(a) for a in ("a1", "a2")}
    specs = [spec for _, spec in tokens.values()] if request.param == "tokens" else []
    async with running(store_db, specs) as host:
        sessions = []
        for name, agent, ns in LAYOUT:
            token = tokens[agent][0] if specs else ""
            c = await connect(host, token)
            s = Session(name, agent, ns, c)
            s.memory_id = await c.init(ns, {"agent": agent})
            reply = await c.store([
                {"key": key(s, t), "content": f"zebra {name} {t}", "tier": t,
                 "tags": ["shared", f"by-{name}"]} for t in TIERS])
            assert reply.errors == []
            sessions.append(s)
        yield sessions
        for s in sessions:
            await s.client.close()


def expected(o: Session, world: list[Session], tiers: tuple[str, ...]) -> set[tuple[str, str]]:
    """(writer, tier) of every entry `o` may see in `tiers`."""
    return {(w.name, t) for w in world for t in tiers if visible(o, w, t)}


def seen(entries: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(writer, tier) of the entries of a reply; checks each content belongs to its key."""
    out = set()
    for e in entries:
        assert e["content"] == f"zebra {e['key']['by']} {e['key']['tier']}"
        assert e["tier"] == e["key"]["tier"]
        out.add((e["key"]["by"], e["key"]["tier"]))
    return out


@pytest.mark.parametrize("tier", ["", *TIERS])
async def test_every_read_path_shows_exactly_the_visible_entries(
    world: list[Session], tier: str
) -> None:
    """Retrieve by key, by tag, by query and with no criteria returns the visible cells only."""
    all_keys = [key(w, t) for w in world for t in TIERS]
    for o in world:
        want = expected(o, world, (tier,) if tier else TIERS)
        reads: dict[str, dict[str, Any]] = {
            "key": {"keys": all_keys}, "tag": {"tags": ["shared"]}, "query": {"query": "zebra"},
            "none": {},
        }
        for how, criteria in reads.items():
            reply = await o.client.retrieve(**criteria, tier=tier, limit=100)
            assert seen(reply.entries) == want, (o.name, how, tier)
            assert reply.total == len(want), (o.name, how, tier)


async def test_a_writers_own_tag_reaches_only_visible_entries(world: list[Session]) -> None:
    """Filtering by another session's tag returns only what that session shares with the reader."""
    for o in world:
        for w in world:
            reply = await o.client.retrieve(tags=[f"by-{w.name}"], limit=100)
            assert seen(reply.entries) == {(w.name, t) for t in TIERS if visible(o, w, t)}


async def test_forget_cannot_reach_invisible_entries(world: list[Session]) -> None:
    """Forgetting another's keys or tags deletes nothing it cannot see; the owners keep them."""
    for o in world:
        hidden = [key(w, t) for w in world for t in TIERS if not visible(o, w, t)]
        assert await o.client.forget(keys=hidden, tier="") == 0
        for w in world:
            if w.ns != o.ns:
                assert await o.client.forget(tags=[f"by-{w.name}"], tier="") == 0
    for w in world:  # every entry is still where it was
        assert {e["key"]["by"] for e in (await w.client.retrieve(
            keys=[key(w, t) for t in TIERS])).entries} == {w.name}


async def test_forget_removes_visible_entries(world: list[Session]) -> None:
    """A session forgets what it may see: its working entry, its agent's episodic entries in
    the namespace (written on another connection too) and the namespace's semantic entries."""
    s1, s2 = world[0], world[1]  # a1 in n1 on two connections
    assert await s1.client.forget(keys=[key(s2, "working")], tier="working") == 0
    assert await s1.client.forget(keys=[key(s1, "working")], tier="working") == 1
    assert await s1.client.forget(keys=[key(s2, "episodic")], tier="episodic") == 1
    assert await s1.client.forget(tags=["shared"], tier="semantic") == 3  # s1, s2, s3 in n1
    assert seen((await world[3].client.retrieve(tier="semantic", limit=100)).entries) == {
        ("s4", "semantic"), ("s5", "semantic")}  # n2 untouched


async def test_another_connections_memory_id_is_not_found(world: list[Session]) -> None:
    """Using a memory_id opened on another connection is memory_not_found for every request."""
    for o in world:
        for w in world:
            if w.client is o.client:
                continue
            for method, args in (
                ("retrieve", {"keys": [key(w, "working")]}),
                ("store", {"entries": [{"key": {"x": 1}, "content": 1, "tier": "episodic"}]}),
                ("forget", {"keys": [key(w, "episodic")]}),
            ):
                with pytest.raises(RemoteError) as err:
                    await getattr(o.client, method)(**args, memory_id=w.memory_id)
                assert err.value.code == "memory_not_found"


async def test_closed_sessions_memory_id_is_not_found(world: list[Session], db_path: Path) -> None:
    """After its connection closes, a session's memory_id is unknown (even to its agent)."""
    s1, s2 = world[0], world[1]
    await s1.client.close()
    with pytest.raises(RemoteError) as err:
        await s2.client.retrieve(memory_id=s1.memory_id)
    assert err.value.code == "memory_not_found"


# -- scores and candidates: another tenant's data never moves or hides yours ---------------

KEYWORDS_ONLY = {"search": {"embedder": "none", "neighbour_hits": 0}}


async def _relevances(c: MemoryClient, query: str) -> list[tuple[str, float]]:
    """(key, relevance) of every match of `query`, best first."""
    got = await c.retrieve(query=query, limit=50)
    return [(e["key"]["k"], e["relevance"]) for e in got.entries]


async def test_another_namespace_never_moves_your_keyword_scores(store_db: str) -> None:
    """What another namespace stores (400 entries full of one of your query's words) changes
    neither which of your entries a query finds nor their relevances: keyword statistics (rows,
    average length, rows holding a term) are the namespace's own."""
    async with running(store_db, **KEYWORDS_ONLY) as host:
        carol = await connect(host)
        await carol.init("carol", {"agent": "carol"})
        await carol.store([
            {"key": {"k": "pw"}, "content": "my password is hunter2", "tier": "episodic"},
            {"key": {"k": "pie"}, "content": "grandma's apple pie recipe", "tier": "episodic"},
            {"key": {"k": "both"}, "content": "apple hunter2 apple", "tier": "semantic"},
            {"key": {"k": "none"}, "content": "nothing to see", "tier": "semantic"}])
        before = await _relevances(carol, "hunter2 apple")
        assert {k for k, _ in before} == {"pw", "pie", "both"}
        mallory = await connect(host)
        await mallory.init("mallory", {"agent": "mallory"})
        for i in range(0, 400, 100):
            await mallory.store([
                {"key": {"i": j}, "content": f"hunter2 hunter2 {'filler ' * (j % 7)}",
                 "tier": "semantic"} for j in range(i, i + 100)])
        after = await _relevances(carol, "hunter2 apple")
        assert [k for k, _ in after] == [k for k, _ in before]
        assert [r for _, r in after] == pytest.approx([r for _, r in before], rel=1e-9)
        await carol.close()
        await mallory.close()


async def _crowded(host: Any) -> tuple[MemoryClient, MemoryClient]:
    """carol's one "zebra crossing" entry, then dave's private "zebra" entries in the same
    namespace: more than `search.max_keyword_matches` and `search.max_term_docs`."""
    carol = await connect(host)
    await carol.init("shared", {"agent": "carol"})
    await carol.store([{"key": {"k": "mine"}, "content": "a zebra crossing",
                        "tier": "episodic"}])
    dave = await connect(host)
    await dave.init("shared", {"agent": "dave"})
    n = host.config.search.max_keyword_matches + 500
    assert n > host.config.search.max_term_docs
    for i in range(0, n, 1000):
        reply = await dave.store([{"key": {"i": j}, "content": f"zebra number {j}",
                                   "tier": "episodic"} for j in range(i, min(n, i + 1000))])
        assert not reply.errors
    return carol, dave


async def test_another_agents_private_entries_neither_hide_yours_nor_count(
    store_db: str
) -> None:
    """Another agent's 4,500 private episodic entries sharing your query's word neither hide
    your own matching entry nor show in your `total`; the other agent still finds its own."""
    async with running(store_db, **KEYWORDS_ONLY) as host:
        carol, dave = await _crowded(host)
        for query in ("zebra", "zebra crossing"):
            got = await carol.retrieve(query=query, limit=10)
            assert [e["key"] for e in got.entries] == [{"k": "mine"}], query
            assert got.total == 1, query
        own = await dave.retrieve(query="zebra", limit=5)
        assert own.total >= 5 and all("i" in e["key"] for e in own.entries)
        await carol.close()
        await dave.close()


async def test_another_agents_private_entries_do_not_drop_your_query_terms(
    store_db: str
) -> None:
    """A word another agent made common with private entries is still searched for you: with
    a second, rarer word in the query ("zebra giraffe"), your "zebra" entry is found (the
    `search.max_term_docs` count is of the entries you may read)."""
    async with running(store_db, **KEYWORDS_ONLY) as host:
        carol, dave = await _crowded(host)
        got = await carol.retrieve(query="zebra giraffe", limit=10)
        assert [e["key"] for e in got.entries] == [{"k": "mine"}]
        assert got.total == 1
        await carol.close()
        await dave.close()
