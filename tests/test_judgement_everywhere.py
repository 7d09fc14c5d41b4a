"""The judgement of a reply is one behaviour everywhere: the library's stores (`SQLiteStore`,
`InMemoryStore`, `EntryStoreMemories` on both backends) and the MCP tool `memory_search` rank an
update above the fact it supersedes and name it, a fact that holds above the one that ended
(its bounds read at the time of the search), collapse near-duplicates when asked, and give the
same order and the same marks as a `memory/retrieve` of the same memories (on SQLite and
PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from support.hosts import make_config, running_host, url_of

from host.client import MemoryClient
from host.config import SearchConfig
from host.library import InMemoryStore, JSONFileStore, Memory, RetrievalResult, SQLiteStore
from host.library.entry_store import EntryStoreMemories
from host.mcp.app import McpApp
from host.store.records import Scope

NS, AGENT = "ns", "a1"
WAIT = SearchConfig(vector_wait=60.0)  # a search waits for its writes' vectors (no time asserted)

# written in this order: a fact, unrelated memories, then the fact's update (which says it
# changed) and two sayings of one preference
FACT = "My climbing gym is Boulderhaus on Canal Street."
UPDATE = "I switched gyms: I now climb at Vertical World near the station."
QUESTION = "Which climbing gym do I go to?"
OTHERS = ["The quarterly budget review is on Monday.", "The office printer is out of toner.",
          "Lunch on Friday is pizza.", "The staging server runs Debian."]
SAYINGS = ["The user prefers concise answers with Python examples.",
           "The user prefers concise answers with examples in Python."]
PREFERENCE = "How should answers for this user look?"


def memories() -> list[Memory]:
    """The memories, oldest first (ids fixed, so every store names them alike)."""
    texts = [FACT, *OTHERS, UPDATE, *SAYINGS]
    return [Memory(id=f"m{i}", content=t) for i, t in enumerate(texts)]


def marks(hits: list[RetrievalResult]) -> list[tuple[str, list[str], list[str]]]:
    """Each hit's id and the ids it supersedes and stands for."""
    return [(h.memory.id, h.supersedes, h.collapsed) for h in hits]


def check_judged(search: Any) -> None:
    """`search(query, k, **judgement)` (a store's) judges as the wire does."""
    first = marks(search(QUESTION, 5))
    assert first[0] == ("m5", ["m0"], []), first  # the update, naming the fact
    assert "m0" in [m[0] for m in first[1:]]  # the fact stays, below it
    plain = marks(search(QUESTION, 5, supersede=False))
    assert all(not s and not c for _i, s, c in plain)
    folded = marks(search(PREFERENCE, 5, collapse=True))
    one = [m for m in folded if m[0] in ("m6", "m7")]
    assert one == [("m7", [], ["m6"])], folded  # the newer stands for both
    every = [m[0] for m in marks(search(PREFERENCE, 5))]
    assert {"m6", "m7"} <= set(every)  # not collapsed unless asked


def test_sqlite_store_search_judges_its_reply(tmp_path: Path) -> None:
    """`SQLiteStore.search` ranks the update first naming the fact it supersedes, gives the
    ranking alone with `supersede=False`, and folds two sayings of one preference into the
    newer when asked to collapse (and only then)."""
    with SQLiteStore(tmp_path / "m.db", search=WAIT) as s:
        for m in memories():
            s.set(m.id, m)

        def search(q: str, k: int, **kw: bool) -> list[RetrievalResult]:
            return s.search(q, k, **kw)

        check_judged(search)


def test_in_memory_store_search_judges_its_reply() -> None:
    """`InMemoryStore.search` (the host's engine over a private copy) judges alike."""
    with InMemoryStore(search=WAIT) as s:
        for m in memories():
            s.set(m.id, m)

        def search(q: str, k: int, **kw: bool) -> list[RetrievalResult]:
            return s.search(q, k, **kw)

        check_judged(search)


@pytest.fixture
async def entry_memories(store_db: str) -> AsyncIterator[EntryStoreMemories]:
    """`EntryStoreMemories` of (NS, AGENT) over a running host's store and search engine, on
    the test's database (SQLite or PostgreSQL)."""
    config = make_config(store_db, search={"vector_wait": 60.0})
    async with running_host(config) as host:
        yield EntryStoreMemories(host.store, Scope(NS, AGENT), config, host.search)


@pytest.mark.all_backends
async def test_entry_store_search_judges_its_reply(entry_memories: EntryStoreMemories) -> None:
    """`EntryStoreMemories.search` (what the MCP tools use) judges alike, on both backends."""
    for m in memories():
        await entry_memories.set(m.id, m)
    got: dict[tuple[str, int, bool, bool], list[RetrievalResult]] = {}
    for q in (QUESTION, PREFERENCE):
        for sup, coll in ((True, False), (False, False), (True, True)):
            got[q, 5, sup, coll] = await entry_memories.search(q, 5, supersede=sup,
                                                                collapse=coll)

    def search(q: str, k: int, supersede: bool = True, collapse: bool = False
               ) -> list[RetrievalResult]:
        return got[q, k, supersede, collapse]

    check_judged(search)


async def test_library_mcp_and_wire_judge_the_same(tmp_path: Path) -> None:
    """On one file, `SQLiteStore.search`, the MCP tool `memory_search` and a `memory/retrieve`
    give the same order and the same marks (`supersedes`, `collapsed`) for the same memories,
    collapsed or not, facts with bounds among them (one ended, its successor current)."""
    db = tmp_path / "m.db"
    config = make_config(db, mcp={"namespace": NS, "agent": AGENT},
                         search={"vector_wait": 60.0})
    with SQLiteStore(db, namespace=NS, agent=AGENT, search=config.search) as lib:
        for m in memories() + ended_memories():
            lib.set(m.id, m)
        by_lib = {(q, c): marks(lib.search(q, 8, collapse=c))
                  for q in (QUESTION, PREFERENCE, WORK, HOME) for c in (False, True)}
    async with McpApp(config) as app, Client(app.server, mode="legacy") as client:
        by_mcp = {}
        for q, c in by_lib:
            result = await client.call_tool("memory_search",
                                            {"query": q, "k": 8, "collapse": c})
            hits = json.loads(result.content[0].text)  # type: ignore[union-attr]
            by_mcp[q, c] = [(h["memory"]["id"], h.get("supersedes", []),
                             h.get("collapsed", [])) for h in hits]
    wire_config = make_config(db)
    async with running_host(wire_config) as host:
        client_ = await MemoryClient.connect(url_of(host))
        await client_.init(NS, {"agent": AGENT})
        by_wire = {}
        for q, c in by_lib:
            reply = await client_.retrieve(query=q, limit=8, collapse=c)

            def ids(keys: list[dict[str, str]]) -> list[str]:
                return [k["id"] for k in keys]

            by_wire[q, c] = [(e["key"]["id"], ids(e.get("supersedes", [])),
                              ids(e.get("collapsed", {}).get("keys", [])))
                             for e in reply.entries]
        await client_.close()
    assert by_lib[QUESTION, False][0] == ("m5", ["m0"], [])
    assert by_lib[WORK, False][0] == ("e5", ["e0"], [])
    assert by_mcp == by_lib
    assert by_wire == by_lib


# facts with bounds (docs/protocol.md, "Time of a fact"): a fact that ended in 2023 and its
# successor since then (which does not say it changed), and an ended fact with no successor
CHANGED, BEFORE = "2023-01-01T00:00:00Z", "2022-06-01T00:00:00Z"
ENDED = [("Alice works at Acme.", None, CHANGED), *((t, None, None) for t in OTHERS),
         ("Alice is a senior engineer at Globex.", CHANGED, None),
         ("Bob lived in a flat in Paris near the river.", None, CHANGED)]
WORK, HOME = "Where does Alice work?", "Where did Bob live?"


def ended_memories() -> list[Memory]:
    """The facts with bounds, oldest first: e0 ended, e5 its successor, e6 ended alone."""
    return [Memory(id=f"e{i}", content=t, valid_from=f, valid_until=u)
            for i, (t, f, u) in enumerate(ENDED)]


def check_ended(search: Any) -> None:
    """`search(query, k, **judgement)` (a store's) puts the current fact above the one that
    ended, naming it; an ended fact with no successor keeps its place; `as_of` before the
    change finds the ended fact alone, unjudged."""
    plain = [m[0] for m in marks(search(WORK, 5, supersede=False))]
    assert plain.index("e0") < plain.index("e5"), plain  # the ranking alone: ended first
    first = marks(search(WORK, 5))
    assert first[0] == ("e5", ["e0"], []), first
    assert "e0" in [m[0] for m in first[1:]]  # still there, below it
    then = marks(search(WORK, 5, as_of=BEFORE))
    assert then[0] == ("e0", [], []) and "e5" not in [m[0] for m in then], then
    alone = marks(search(HOME, 5))
    assert alone[0] == ("e6", [], []), alone


def test_library_stores_put_the_current_fact_above_the_ended_one(tmp_path: Path) -> None:
    """`SQLiteStore.search`, `InMemoryStore.search` and `JSONFileStore.search` read the
    memories' bounds at the time of the search: the fact that holds first, naming the one
    that ended."""
    with SQLiteStore(tmp_path / "m.db", search=WAIT) as s, InMemoryStore(search=WAIT) as mem, \
            JSONFileStore(tmp_path / "m.json", search=WAIT) as js:
        for store in (s, mem, js):
            for m in ended_memories():
                store.set(m.id, m)
            check_ended(store.search)


def test_bounds_that_hold_change_no_order(tmp_path: Path) -> None:
    """The memories without bounds and the same memories valid since 2023 (bounds that hold)
    give the same order and marks, judged or not: only a fact not valid now moves."""
    with SQLiteStore(tmp_path / "a.db", search=WAIT) as a, \
            SQLiteStore(tmp_path / "b.db", search=WAIT) as b:
        for m in memories():
            a.set(m.id, m)
            b.set(m.id, Memory.model_validate({**m.model_dump(), "valid_from": CHANGED}))
        for q in (QUESTION, PREFERENCE, WORK):
            for kw in ({}, {"supersede": False}, {"collapse": True}):
                assert marks(a.search(q, 8, **kw)) == marks(b.search(q, 8, **kw))


@pytest.mark.all_backends
async def test_entry_store_puts_the_current_fact_above_the_ended_one(
        entry_memories: EntryStoreMemories) -> None:
    """`EntryStoreMemories.search` (the MCP tools') alike, on both backends."""
    for m in ended_memories():
        await entry_memories.set(m.id, m)
    got: dict[tuple[str, bool, str | None], list[RetrievalResult]] = {}
    for q in (WORK, HOME):
        for sup, at in ((True, None), (False, None), (True, BEFORE)):
            got[q, sup, at] = await entry_memories.search(q, 5, supersede=sup, as_of=at)

    def search(q: str, k: int, supersede: bool = True, as_of: str | None = None
               ) -> list[RetrievalResult]:
        return got[q, supersede, as_of]

    check_ended(search)


@pytest.mark.all_backends
async def test_retrieve_puts_the_current_fact_above_the_ended_one(store_db: str) -> None:
    """`memory/retrieve` on SQLite and PostgreSQL: the fact that holds first, naming the one
    that ended, whether the read covers the working tier (an unrelated working entry beside)
    or the persistent tiers alone; with `as_of` before the change the ended fact alone."""
    async with running_host(make_config(store_db)) as host:
        async with await MemoryClient.connect(url_of(host)) as c:
            await c.init(NS, {"agent": AGENT})
            for i, (t, f, u) in enumerate(ENDED):
                e: dict[str, Any] = {"key": {"id": f"e{i}"}, "content": t, "tier": "episodic"}
                e.update({k: v for k, v in (("valid_from", f), ("valid_until", u)) if v})
                await c.store([e])
            await c.store([{"key": {"id": "w"}, "content": "Alice's badge is at the front desk.",
                            "tier": "working"}])
            await host.search.drain()

            async def search(q: str, k: int, supersede: bool = True, as_of: str | None = None,
                             tier: str = "") -> list[RetrievalResult]:
                extra: dict[str, Any] = {} if as_of is None else {"as_of": as_of}
                reply = await c.retrieve(query=q, limit=k, tier=tier, supersede=supersede,
                                         **extra)
                return [RetrievalResult(
                    memory=Memory(id=e["key"]["id"], content="-"), relevance_score=0.0,
                    combined_score=0.0, supersedes=[s["id"] for s in e.get("supersedes", [])])
                        for e in reply.entries]

            for tier in ("", "episodic"):  # every tier (working too), then the persistent one
                got = {(q, sup, at): await search(q, 8, sup, at, tier)
                       for q in (WORK, HOME) for sup, at in ((True, None), (False, None),
                                                             (True, BEFORE))}
                check_ended(lambda q, k, supersede=True, as_of=None, _g=got:
                            [h for h in _g[q, supersede, as_of] if h.memory.id != "w"][:k])
