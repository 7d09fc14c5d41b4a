"""MCP `memory_search` on the host's search engine: it finds facts by meaning, and reports the
same memories, relevance and order as a `memory/retrieve` over the wire on the same database."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult
from support.hosts import client_of, make_config, running_host

from host.mcp.app import McpApp

# Fifteen facts and, for each, a question that shares no content word with it (stems included):
# only meaning links them.
FACTS = [
    ("Maria adopted a beagle named Toby last week.", "Who got a new dog recently?"),
    ("The user is allergic to peanuts.", "Which foods make me sick?"),
    ("My daughter plays the violin in the school orchestra.",
     "What instrument does my kid practise?"),
    ("I moved to Lisbon in March.", "Which city do I live in now?"),
    ("The dentist appointment is on Friday at 3 pm.", "When do I see the tooth doctor?"),
    ("I drive a red Toyota Corolla.", "What car do I own?"),
    ("My favourite dish is sushi.", "Which cuisine do I enjoy eating most?"),
    ("I run a marathon every autumn.", "What long race do I take part in each year?"),
    ("My wife's birthday is on the 12th of June.", "When was my spouse born?"),
    ("We keep our passwords in Bitwarden.", "Which tool stores our login secrets?"),
    ("I am learning Japanese on Duolingo.", "Which language am I studying?"),
    ("The team standup happens at 9:30 every morning.", "When is the daily meeting?"),
    ("I prefer tea over coffee.", "What hot drink do I choose?"),
    ("Our cat Whiskers turns twelve this year.", "How old is the family pet?"),
    ("I work as a nurse at the city hospital.", "What is my job?"),
]


def _ok(result: CallToolResult) -> Any:
    """The structured payload of a successful tool call, unwrapped."""
    assert not result.is_error, result.content
    payload = result.structured_content
    assert payload is not None
    return payload["result"] if set(payload) == {"result"} else payload


def _config(db: Path) -> Any:
    # vector_wait: a search waits for the vectors of what was just put (no time is asserted)
    return make_config(db, mcp={"namespace": "ns", "agent": "a1", "max_k": 20},
                       search={"vector_wait": 60.0})


async def _put_facts(client: Client) -> list[str]:
    ids = []
    for fact, _question in FACTS:
        m = _ok(await client.call_tool("memory_put", {"content": fact}))
        ids.append(m["id"])
    return ids


def _top(hits: list[dict[str, Any]]) -> list[str]:
    return [h["memory"]["id"] for h in hits]


async def test_mcp_search_finds_paraphrases_as_the_wire_does(db_path: Path) -> None:
    """Facts put through MCP are among the 3 best hits of questions sharing no content word with
    them (at least 12 of 15), and a host on the same file answers each question with the same memories, the
    same relevance and the same order over the wire."""
    config = _config(db_path)
    by_mcp: list[list[tuple[str, float, float]]] = []
    async with McpApp(config) as app, Client(app.server, mode="legacy") as client:
        ids = await _put_facts(client)
        for _fact, question in FACTS:
            hits = _ok(await client.call_tool("memory_search", {"query": question, "k": 3}))
            by_mcp.append([(h["memory"]["id"], h["relevance_score"], h["combined_score"])
                           for h in hits])
    found = [q for (_f, q), hits, want in zip(FACTS, by_mcp, ids, strict=True)
             if want in [h[0] for h in hits]]
    # cosine similarity alone ranks every fact first or second; keywords alone find 3 or fewer
    assert len(found) >= 12, found

    async with running_host(make_config(db_path)) as host, \
            await client_of(host, "websockets") as ws:
        await ws.init("ns", {"agent": "a1"})
        for (_fact, question), mcp_hits in zip(FACTS, by_mcp, strict=True):
            wire = (await ws.retrieve(query=question, limit=3)).entries
            assert [e["key"]["id"] for e in wire] == [h[0] for h in mcp_hits], question
            assert [e["relevance"] for e in wire] == pytest.approx(
                [h[1] for h in mcp_hits], abs=1e-6)
            # combined moves only with recency (seconds later: well under 1e-4)
            assert [e["combined"] for e in wire] == pytest.approx(
                [h[2] for h in mcp_hits], abs=1e-4)


async def test_mcp_search_finds_by_meaning_what_a_wire_client_stored(db_path: Path) -> None:
    """Facts stored over the wire (and embedded by the host) are found by meaning through an
    `a2e-host mcp` process started afterwards on the same file, over stdio."""
    config = make_config(db_path)
    async with running_host(config) as host, await client_of(host, "websockets") as ws:
        await ws.init("ns", {"agent": "a1"})
        await ws.store([{"key": {"id": f"fact-{i}"}, "tier": "semantic", "content": fact}
                        for i, (fact, _q) in enumerate(FACTS)])
        await host.search.drain()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "host.cli", "mcp", "--db", str(db_path), "--namespace", "ns",
              "--agent", "a2"],
        cwd=str(db_path.parent),
        env={"PYTHONUNBUFFERED": "1", **{k: v for k, v in os.environ.items()
                                         if k == "PYTHONPATH"}})
    async with Client(params, mode="legacy") as client:
        for i in (0, 2, 4, 5, 9):  # the dog, the violin, the dentist, the car, the passwords
            question = FACTS[i][1]
            hits = _ok(await client.call_tool("memory_search", {"query": question, "k": 3}))
            assert f"fact-{i}" in _top(hits), question


async def test_a_host_and_mcp_on_one_file_find_what_the_other_embedded(db_path: Path) -> None:
    """With a host and an MCP server running on one file, each embedding in the background,
    facts the MCP server put and embedded are found by meaning over the wire, and facts a wire
    client stored and the host embedded are found by meaning through MCP (each process reads
    the vectors the other wrote before its next batch)."""
    mine, theirs = FACTS[:5], FACTS[5:10]
    async with running_host(make_config(db_path, search={"vector_wait": 60.0})) as host, \
            await client_of(host, "websockets") as ws, McpApp(_config(db_path)) as app, \
            Client(app.server, mode="legacy") as client:
        await ws.init("ns", {"agent": "a1"})
        ids = [_ok(await client.call_tool("memory_put", {"content": f, "memory_type": "semantic"}))
               ["id"] for f, _q in mine]
        _ok(await client.call_tool("memory_search", {"query": "dog", "k": 1}))  # embedded
        assert await app.search.count_backlog() == 0
        await ws.store([{"key": {"id": f"fact-{i}"}, "tier": "semantic", "content": fact}
                        for i, (fact, _q) in enumerate(theirs)])
        await host.search.drain()  # the host embeds its own, and reads the MCP server's
        await app.search.embed_pending()  # the MCP server reads the host's
        for i in (0, 2, 4):  # the dog, the violin, the dentist
            wire = (await ws.retrieve(query=mine[i][1], limit=3)).entries
            assert ids[i] in [e["key"]["id"] for e in wire], mine[i][1]
        for i in (0, 4):  # the car, the passwords
            hits = _ok(await client.call_tool("memory_search", {"query": theirs[i][1], "k": 3}))
            assert f"fact-{i}" in _top(hits), theirs[i][1]


async def test_mcp_inside_a_host_searches_on_the_host_engine(db_path: Path) -> None:
    """MCP tools built on a running host's store and engine find by meaning what a wire client
    just stored (the host's own index, nothing to catch up), with the wire's relevance."""
    config = _config(db_path)
    async with running_host(config) as host, await client_of(host, "websockets") as ws:
        await ws.init("ns", {"agent": "a1"})
        await ws.store([{"key": {"id": f"fact-{i}"}, "tier": "semantic", "content": fact}
                        for i, (fact, _q) in enumerate(FACTS)])
        await host.search.drain()
        async with McpApp(config, search=host.search) as app, \
                Client(app.server, mode="legacy") as client:
            assert app.store is host.store
            question = FACTS[4][1]  # the dentist
            hits = _ok(await client.call_tool("memory_search", {"query": question, "k": 3}))
            wire = (await ws.retrieve(query=question, limit=3)).entries
            assert "fact-4" in _top(hits)
            assert _top(hits) == [e["key"]["id"] for e in wire]
            assert [h["relevance_score"] for h in hits] == pytest.approx(
                [e["relevance"] for e in wire], abs=1e-9)
        assert (await ws.retrieve(query=question, limit=3)).entries  # the host still serves
