"""One library adapter over the host database: `SQLiteStore` and `EntryStoreMemories` (what the
MCP tools use) store the same memory as the same bytes, keep the same `created_at` on overwrite
and rank the same way (the host's search engine), through the library and through the MCP
tools."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from support.hosts import make_config

from host.config import Config
from host.library.entry_store import EntryStoreMemories
from host.library.models import Memory, MemoryImportance, MemoryType
from host.library.sqlite_store import SQLiteStore
from host.mcp.app import McpApp
from host.search.embed import make_embedder
from host.search.engine import SearchEngine
from host.store.records import Scope
from host.store.sqlite.store import SQLiteEntryStore

NS, AGENT = "ns", "a1"
WHEN = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)


@asynccontextmanager
async def entry_memories(path: Path, config: Config | None = None
                         ) -> AsyncIterator[EntryStoreMemories]:
    """`EntryStoreMemories` of (NS, AGENT) over an open `SQLiteEntryStore` on `path`, searching
    with a started engine and the embedder of `config.search`."""
    config = config or Config()
    store = SQLiteEntryStore(str(path))
    await store.open()
    engine = SearchEngine(store, make_embedder(config.search), config.search)
    await engine.start()
    try:
        yield EntryStoreMemories(store, Scope(NS, AGENT), config, engine)
    finally:
        await engine.stop()
        await store.close()


def rows(path: Path) -> list[tuple[Any, ...]]:
    """Every stored entry of `path`, as the host reads it, in key order."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT namespace, tier, owner, key, content, tags, source, score, ttl, created_at,"
            " updated_at FROM entries ORDER BY tier, key").fetchall()
    finally:
        conn.close()


def memory(content: str, **fields: Any) -> Memory:
    return Memory(content=content, created_at=WHEN, last_accessed=WHEN, **fields)


MEMORIES = [
    memory("deploys happen on Tuesdays", memory_type=MemoryType.PROCEDURAL,
           importance=MemoryImportance.HIGH, metadata={"source": "standup", "n": [1, 2.5]}),
    memory("the user prefers concise Python answers", memory_type=MemoryType.SEMANTIC),
    memory("we shipped the Python client on a Tuesday", importance=MemoryImportance.LOW),
    memory("Python style: type hints everywhere", memory_type=MemoryType.SEMANTIC,
           importance=MemoryImportance.CRITICAL),
]


async def test_the_same_memory_is_the_same_bytes(tmp_path: Path) -> None:
    """Each memory set through `SQLiteStore` and through `EntryStoreMemories` gives the same
    stored row, byte for byte (key, content, tags, score, timestamps)."""
    with SQLiteStore(tmp_path / "a.db", namespace=NS, agent=AGENT) as lib:
        for m in MEMORIES:
            lib.set(m.id, m)
    async with entry_memories(tmp_path / "b.db") as mcp_side:
        for m in MEMORIES:
            await mcp_side.set(m.id, m)
    a, b = rows(tmp_path / "a.db"), rows(tmp_path / "b.db")
    assert len(a) == len(MEMORIES) and a == b
    assert all(isinstance(r[4], str) and ", " not in r[4] for r in a)  # compact JSON


async def test_overwrite_keeps_the_first_created_at(tmp_path: Path) -> None:
    """Setting a key again (new content, a later created_at) keeps the entry's first created_at
    in both adapters, so both files hold the same row and `get` gives the same memory."""
    first = memory("the build is red")
    again = first.model_copy(update={"content": "the build is green",
                                     "created_at": WHEN + timedelta(days=1),
                                     "last_accessed": WHEN + timedelta(days=1)})
    with SQLiteStore(tmp_path / "a.db", namespace=NS, agent=AGENT) as lib:
        lib.set("k", first)
        lib.set("k", again)
        got_lib = lib.get("k")
    async with entry_memories(tmp_path / "b.db") as mcp_side:
        await mcp_side.set("k", first)
        await mcp_side.set("k", again)
        got_mcp = await mcp_side.get("k")
    assert got_lib is not None and got_mcp is not None
    assert got_lib.created_at == got_mcp.created_at == WHEN
    assert got_lib.content == got_mcp.content == "the build is green"
    a, b = rows(tmp_path / "a.db"), rows(tmp_path / "b.db")
    assert [r[:10] for r in a] == [r[:10] for r in b]  # updated_at: the time of each get
    assert a[0][9] == WHEN.timestamp()


@pytest.mark.parametrize("query", ["Python", "Tuesday deploys", "python answers style"])
async def test_the_same_ranking_through_the_library_and_mcp(tmp_path: Path, query: str) -> None:
    """On one file, `SQLiteStore.search`, `EntryStoreMemories.search` and the MCP tool
    `memory_search` return the same memories in the same order with the same scores."""
    db = tmp_path / "m.db"
    # vector_wait: the library's search waits for the vectors of its writes (no time asserted)
    config = make_config(db, mcp={"namespace": NS, "agent": AGENT}, search={"vector_wait": 60.0})
    with SQLiteStore(db, namespace=NS, agent=AGENT, search=config.search) as lib:
        for m in MEMORIES:
            lib.set(m.id, m)
        by_lib = [(r.memory.id, r.relevance_score, r.combined_score) for r in lib.search(query, 4)]
    async with entry_memories(db, config) as mcp_side:
        by_adapter = [(r.memory.id, r.relevance_score, r.combined_score)
                      for r in await mcp_side.search(query, 4)]
    async with McpApp(config) as app, Client(app.server, mode="legacy") as client:
        result = await client.call_tool("memory_search", {"query": query, "k": 4})
        hits = json.loads(result.content[0].text)  # type: ignore[union-attr]
        by_mcp = [(h["memory"]["id"], h["relevance_score"], h["combined_score"]) for h in hits]
    assert len(by_lib) >= 2
    for other in (by_adapter, by_mcp):
        assert [h[0] for h in other] == [h[0] for h in by_lib]
        assert [h[1] for h in other] == pytest.approx([h[1] for h in by_lib], abs=1e-9)
        # combined moves only with recency between the three searches (seconds apart)
        assert other == [(i, pytest.approx(r, abs=1e-9), pytest.approx(c, abs=1e-4))
                         for i, r, c in by_lib]


# Facts and questions sharing no content word with them, among unrelated memories.
BY_MEANING = [
    ("Maria adopted a beagle named Toby last week.", "Who got a new dog recently?"),
    ("The dentist appointment is on Friday at 3 pm.", "When do I see the tooth doctor?"),
    ("We keep our passwords in Bitwarden.", "Which tool stores our login secrets?"),
]
UNRELATED = ["The quarterly budget review is on Monday.", "The office printer is out of toner.",
             "Lunch on Friday is pizza.", "The staging server runs Debian."]


def test_every_library_store_ranks_with_the_host_engine(tmp_path: Path) -> None:
    """The same memories in `InMemoryStore`, `JSONFileStore` and `SQLiteStore` are found by
    meaning, with the same hits, the same relevance and the same order in all three."""
    from host.config import SearchConfig
    from host.library import InMemoryStore, JSONFileStore

    cfg = SearchConfig(vector_wait=60.0)  # each search waits for the vectors (no time asserted)
    facts = [memory(f) for f, _q in BY_MEANING]
    items = [(m.id, m) for m in [memory(t) for t in UNRELATED] + facts]
    results = []
    for store in (InMemoryStore(search=cfg), JSONFileStore(tmp_path / "m.json", search=cfg),
                  SQLiteStore(tmp_path / "m.db", search=cfg)):
        with store:
            for key, m in items:
                store.set(key, m)
            results.append([[(h.memory.id, h.relevance_score, h.combined_score)
                             for h in store.search(q, k=3)] for _f, q in BY_MEANING])
    for fact, hits in zip(facts, results[0], strict=True):
        assert fact.id in [h[0] for h in hits]
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert [h[0] for h in b] == [h[0] for h in a]
            assert [h[1] for h in b] == pytest.approx([h[1] for h in a], abs=1e-9)
            assert [h[2] for h in b] == pytest.approx([h[2] for h in a], abs=1e-6)
