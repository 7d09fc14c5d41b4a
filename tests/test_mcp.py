"""The MCP tools in process: the SDK's own client over the in-memory transport (JSON-RPC
framing, initialize handshake), on a real SQLite file."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult
from support.hosts import make_config

from host.config import Config
from host.mcp.app import McpApp
from host.rules.sync import load_into_store
from host.store.records import Query, Scope
from protocol.keys import canonical_key

RULES = Path(__file__).parent / "data" / "rules"


@pytest.fixture
def config(db_path: Path) -> Config:
    """A config on the test's database file, acting as agent "a1" in namespace "ns"."""
    return make_config(db_path, mcp={"namespace": "ns", "agent": "a1", "max_k": 20})


@asynccontextmanager
async def connected(config: Config) -> AsyncIterator[tuple[McpApp, Client]]:
    """The MCP app on `config` with its store open, and the SDK's client connected to it in
    process through the in-memory transport (a context manager, not a fixture: the client's
    task group must start and end in the test's own task)."""
    async with McpApp(config) as app, Client(app.server, mode="legacy") as client:
        yield app, client


def _ok(result: CallToolResult) -> Any:
    """The structured payload of a successful call (unwrapped from `result`), checked against
    its text content."""
    assert not result.is_error, result.content
    payload = result.structured_content
    assert payload is not None
    if set(payload) == {"result"}:
        payload = payload["result"]
    assert json.loads(result.content[0].text) == payload  # type: ignore[union-attr]
    return payload


def _error(result: CallToolResult) -> str:
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]


async def test_tools_are_listed_with_titles_enums_and_hints(config: Config) -> None:
    """Every tool has a title, a description, typed parameters with enums and the right hints."""
    async with connected(config) as (app, client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"memory_put", "memory_get", "memory_search", "memory_forget",
                              "rules_for"}
        for t in tools.values():
            assert t.title and t.description and t.annotations is not None
            assert "\n " not in t.description  # dedented for the model to read
            assert t.annotations.open_world_hint is False
        put = tools["memory_put"].input_schema
        assert put["required"] == ["content"]
        schema = json.dumps(put)
        for value in ("episodic", "semantic", "procedural", "working", "low", "critical"):
            assert f'"{value}"' in schema
        assert put["properties"]["memory_type"]["default"] == "episodic"
        assert put["properties"]["importance"]["default"] == "medium"
        k = tools["memory_search"].input_schema["properties"]["k"]
        assert (k["minimum"], k["maximum"], k["default"]) == (1, 20, 5)
        for name in ("memory_get", "memory_search", "rules_for"):
            assert tools[name].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert tools["memory_put"].annotations.read_only_hint is False  # type: ignore[union-attr]
        assert tools["memory_forget"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert tools["memory_forget"].annotations.idempotent_hint is True  # type: ignore[union-attr]
        assert tools["memory_put"].output_schema is not None


async def test_put_get_search_forget_round_trip(config: Config) -> None:
    """A memory put is got by its id, found by a search, and gone after forget."""
    async with connected(config) as (app, client):
        m = _ok(await client.call_tool(
            "memory_put",
            {"content": "The user prefers tabs over spaces", "memory_type": "semantic",
             "importance": "high"},
        ))
        assert (m["content"], m["memory_type"], m["importance"]) == (
            "The user prefers tabs over spaces", "semantic", "high")
        got = _ok(await client.call_tool("memory_get", {"memory_id": m["id"]}))
        assert got["id"] == m["id"] and got["content"] == m["content"]
        hits = _ok(await client.call_tool("memory_search", {"query": "tabs or spaces?"}))
        assert [h["memory"]["id"] for h in hits] == [m["id"]]
        assert 0 < hits[0]["relevance_score"] <= 1 and 0 < hits[0]["combined_score"] <= 1
        assert _ok(await client.call_tool("memory_forget", {"memory_id": m["id"]})) == {
            "memory_id": m["id"], "deleted": True}
        assert _ok(await client.call_tool("memory_get", {"memory_id": m["id"]})) is None
        assert _ok(await client.call_tool("memory_forget", {"memory_id": m["id"]}))["deleted"] is False
        assert _ok(await client.call_tool("memory_search", {"query": "tabs"})) == []


async def test_defaults_are_episodic_and_medium(config: Config) -> None:
    """Without type or importance a memory is episodic with medium importance."""
    async with connected(config) as (app, client):
        m = _ok(await client.call_tool("memory_put", {"content": "deployed v2 to staging"}))
        assert (m["memory_type"], m["importance"]) == ("episodic", "medium")


async def test_search_ranks_importance_and_honours_k(config: Config) -> None:
    """At equal relevance a critical memory ranks above a low one; k caps the list."""
    async with connected(config) as (app, client):
        low = _ok(await client.call_tool(
            "memory_put", {"content": "database port is 5432", "importance": "low"}))
        crit = _ok(await client.call_tool(
            "memory_put", {"content": "database port is 6543", "importance": "critical"}))
        hits = _ok(await client.call_tool("memory_search", {"query": "database port"}))
        assert [h["memory"]["id"] for h in hits] == [crit["id"], low["id"]]
        one = _ok(await client.call_tool("memory_search", {"query": "database port", "k": 1}))
        assert [h["memory"]["id"] for h in one] == [crit["id"]]


async def test_enum_values_are_case_insensitive(config: Config) -> None:
    """`PROCEDURAL` and ` High ` are read as procedural and high."""
    async with connected(config) as (app, client):
        m = _ok(await client.call_tool(
            "memory_put", {"content": "run ruff before committing", "memory_type": "PROCEDURAL",
                           "importance": " High "}))
        assert (m["memory_type"], m["importance"]) == ("procedural", "high")


@pytest.mark.parametrize(
    ("tool", "args", "fix"),
    [
        ("memory_put", {"content": "x", "memory_type": "longterm"}, "'episodic', 'semantic'"),
        ("memory_put", {"content": "x", "importance": "urgent"}, "'critical'"),
        ("memory_put", {"content": ""}, "content"),
        ("memory_put", {"content": "   "}, "content is blank"),
        ("memory_search", {"query": ""}, "query"),
        ("memory_search", {"query": "?!"}, "no searchable words"),
        ("memory_search", {"query": "x", "k": 0}, "greater than or equal to 1"),
        ("memory_search", {"query": "x", "k": 21}, "less than or equal to 20"),
        ("memory_get", {}, "memory_id"),
    ],
)
async def test_caller_mistakes_are_tool_errors(
    config: Config, tool: str, args: dict[str, Any], fix: str
) -> None:
    """A caller mistake is a tool error naming what to fix, with no traceback."""
    async with connected(config) as (app, client):
        text = _error(await client.call_tool(tool, args))
        assert fix in text
        assert "Traceback" not in text


async def test_oversized_content_is_a_tool_error(db_path: Path) -> None:
    """Content over `limits.max_entry_bytes` is refused with the limit in the message."""
    config = make_config(db_path, limits={"max_entry_bytes": 100})
    async with McpApp(config) as app, Client(app.server, mode="legacy") as c:
        text = _error(await c.call_tool("memory_put", {"content": "é" * 60}))
        assert "120 bytes, over the limit of 100" in text


async def test_quota_is_a_tool_error(db_path: Path) -> None:
    """A write past the agent's quota is a tool error telling the model to forget something."""
    config = make_config(db_path, limits={"max_entries_per_agent": 1})
    async with McpApp(config) as app, Client(app.server, mode="legacy") as c:
        _ok(await c.call_tool("memory_put", {"content": "first"}))
        assert "memory is full" in _error(await c.call_tool("memory_put", {"content": "second"}))


async def test_a_crash_shows_no_internals(db_path: Path) -> None:
    """A failure that is not the caller's (the store closed underneath) shows only the tool name."""
    async with McpApp(make_config(db_path)) as app, Client(app.server, mode="legacy") as c:
        await app.store.close()
        text = _error(await c.call_tool("memory_put", {"content": "anything"}))
        assert text == "Error executing tool memory_put"


async def test_working_memories_stay_in_process(config: Config) -> None:
    """A working memory is found by search and get but is not written to the database."""
    async with connected(config) as (app, client):
        m = _ok(await client.call_tool(
            "memory_put", {"content": "scratch: try the binary search", "memory_type": "working"}))
        hits = _ok(await client.call_tool("memory_search", {"query": "binary search"}))
        assert [h["memory"]["id"] for h in hits] == [m["id"]]
        assert _ok(await client.call_tool("memory_get", {"memory_id": m["id"]}))["id"] == m["id"]
        async with McpApp(app.config) as other, Client(other.server, mode="legacy") as c2:
            assert _ok(await c2.call_tool("memory_get", {"memory_id": m["id"]})) is None


async def test_episodic_is_private_semantic_is_shared(config: Config) -> None:
    """Another agent of the namespace sees a semantic memory but not an episodic one."""
    async with McpApp(config) as a1, Client(a1.server, mode="legacy") as c1:
        ep = _ok(await c1.call_tool("memory_put", {"content": "I fixed the flaky test"}))
        fact = _ok(await c1.call_tool(
            "memory_put", {"content": "the CI runs on two cores", "memory_type": "semantic"}))
    other = config.model_copy(update={"mcp": config.mcp.model_copy(update={"agent": "a2"})})
    async with McpApp(other) as a2, Client(a2.server, mode="legacy") as c2:
        assert _ok(await c2.call_tool("memory_get", {"memory_id": ep["id"]})) is None
        assert _ok(await c2.call_tool("memory_get", {"memory_id": fact["id"]}))["id"] == fact["id"]


async def test_rules_for_lists_the_loaded_rules(config: Config) -> None:
    """`rules_for` returns the namespace's loaded rules for a path, most specific first."""
    async with connected(config) as (app, client):
        report = await load_into_store(app.store, "ns", RULES, app.config)
        assert report.stored > 0
        rules = _ok(await client.call_tool("rules_for", {"path": "host/app.py", "module": "server"}))
        levels = [r["level"] for r in rules]
        assert levels[0] == "file-specific" and levels[-1] == "general"
        assert "module" in levels
        assert _ok(await client.call_tool("rules_for", {"path": "notes.txt"}))[-1]["level"] == (
            "general")


MAR = 1_772_323_200.0  # 2026-03-01T00:00:00Z


async def test_the_time_of_a_fact(config: Config) -> None:
    """`memory_put` takes `valid_from` / `valid_until` (seconds or ISO text), returns them and
    stores them as the entry's (what a wire client reads); `memory_search` with `as_of` finds
    what was valid then, without it every memory; a memory without bounds shows none."""
    async with connected(config) as (app, client):
        boston = _ok(await client.call_tool("memory_put", {
            "content": "I live in Boston.", "memory_type": "semantic",
            "valid_until": "2026-03-01T01:00:00+01:00"}))
        denver = _ok(await client.call_tool("memory_put", {
            "content": "I live in Denver.", "memory_type": "semantic", "valid_from": MAR}))
        dog = _ok(await client.call_tool("memory_put", {"content": "I live with a dog."}))
        assert boston["valid_until"] == "2026-03-01T01:00:00+01:00"
        assert "valid_from" not in boston
        assert denver["valid_from"] == "2026-03-01T00:00:00+00:00"
        assert "valid_from" not in dog and "valid_until" not in dog
        got = _ok(await client.call_tool("memory_get", {"memory_id": boston["id"]}))
        assert got["valid_until"] == "2026-03-01T00:00:00+00:00"  # the same instant, in UTC
        q = Query(tiers=("semantic",), keys=(canonical_key({"id": denver["id"]}),))
        (e,), _ = await app.store.find(Scope("ns", "a1"), q, time.time())
        assert (e.valid_from, e.valid_until) == (MAR, None)

        async def at(**args: Any) -> set[str]:
            hits = _ok(await client.call_tool("memory_search",
                                              {"query": "where do I live", **args}))
            return {h["memory"]["id"] for h in hits}

        assert await at() == {boston["id"], denver["id"], dog["id"]}
        assert await at(as_of="2026-01-15T12:00:00Z") == {boston["id"], dog["id"]}
        assert await at(as_of=MAR) == {denver["id"], dog["id"]}


@pytest.mark.parametrize(("tool", "args", "fix"), [
    ("memory_put", {"valid_from": "2026-03-01"}, "valid_from: an ISO-8601 date-time needs a zone"),
    ("memory_put", {"valid_until": "soon"}, "valid_until: not an ISO-8601 date-time"),
    ("memory_put", {"valid_from": MAR, "valid_until": "2026-01-01T00:00:00Z"},
     "valid_until must be after valid_from"),
    ("memory_put", {"valid_from": 1e13}, "valid_from: out of the years 1 to 9999"),
    ("memory_put", {"valid_until": "9" * 65}, "valid_until: at most 64 characters"),
    ("memory_put", {"valid_from": True}, "not true or false"),
    ("memory_search", {"as_of": "2026-03-01T00:00:00"}, "as_of: an ISO-8601 date-time needs"),
    ("memory_search", {"as_of": -1e12}, "as_of: out of the years 1 to 9999"),
    ("memory_search", {"as_of": False}, "not true or false"),
])
async def test_a_bad_instant_is_a_tool_error_and_stores_nothing(
        config: Config, tool: str, args: dict[str, Any], fix: str) -> None:
    """A malformed bound or `as_of`, or an empty window, is a tool error naming the field and
    the forms an instant takes; nothing is stored."""
    async with connected(config) as (app, client):
        base = {"content": "I live in Boston."} if tool == "memory_put" else {"query": "Boston"}
        text = _error(await client.call_tool(tool, {**base, **args}))
        assert fix in text and "Traceback" not in text
        _, total = await app.store.find(Scope("ns", "a1"),
                                        Query(tiers=("episodic", "semantic")), time.time())
        assert total == 0 and len(app.memories.working) == 0
