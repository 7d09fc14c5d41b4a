"""The MCP server's namespace resource: a client listening to it is told when a change it may
read commits (through the MCP tools or any other writer of the database), not for others'."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from mcp import Client
from support.hosts import make_config

from host.mcp.app import McpApp
from host.mcp.changes import namespace_uri
from host.store.records import NewEntry, Scope


async def test_a_listener_is_told_of_the_changes_it_may_read(db_path: Path) -> None:
    """A store through the tools and a semantic store by another agent each send
    `notifications/resources/updated` for the namespace resource; another agent's episodic
    store does not count as a change for this agent."""
    config = make_config(db_path, mcp={"namespace": "ns", "agent": "a1"},
                         watch={"poll_interval": 0.05}, search={"embedder": "none"})
    uri = namespace_uri("ns")
    async with McpApp(config) as app, Client(app.server) as client:
        assert app.feed is not None
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert listed == [uri]
        before = json.loads((await client.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]
        assert before["namespace"] == "ns" and before["agent"] == "a1"
        async with client.listen(resource_subscriptions=[uri]) as sub:
            events = aiter(sub)
            result = await client.call_tool("memory_put", {"content": "the sky is green"})
            assert not result.is_error
            assert (await asyncio.wait_for(anext(events), 10)).uri == uri
            other = Scope("ns", "a2")
            await app.feed.stop()  # look by hand now: is another agent's episodic a change?
            await app.store.put(other, [NewEntry("episodic", b'{"k":1}', b'"mine"')], 1.0)
            assert await app.feed.poll() is False
            await app.store.put(other, [NewEntry("semantic", b'{"k":2}', b'"ours"')], 1.0)
            assert await app.feed.poll() is True
            assert (await asyncio.wait_for(anext(events), 10)).uri == uri
        after = json.loads((await client.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]
        assert int(after["cursor"]) > int(before["cursor"])
