"""The MCP server's namespace resource and its `notifications/resources/updated`.

`a2e-host mcp` offers one resource, `a2e://namespace/<namespace>` (its configured namespace),
whose text is a small JSON object: the namespace, the agent and the change-log cursor of the
newest change the agent may read. A client that listens to it (`subscriptions/listen`, the
SDK's `Client.listen(resource_subscriptions=[uri])`) is sent `notifications/resources/updated`
when a change it may read commits: a store, forget or expiry of the namespace's semantic
entries or of the agent's own episodic ones, through this process, a WebSocket host or the CLI.
It then reads again with the tools. The MCP process follows the store's change log
(`host.store.changes`) every `watch.poll_interval` seconds, as a host follows what other
processes commit.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from host.lifecycle import Periodic
from host.store.changes import PAGE, PAGE_BYTES, decode_entries
from host.store.interface import EntryStore
from host.store.records import Scope

__all__ = ["NamespaceFeed", "namespace_uri"]

log = logging.getLogger("a2e_host.mcp")



def namespace_uri(namespace: str) -> str:
    """The URI of the resource of `namespace`."""
    return f"a2e://namespace/{namespace}"


class NamespaceFeed:
    """Follows one scope's changes in a change log; `publish(uri)` for each one it may read."""

    def __init__(self, changes: EntryStore, scope: Scope, interval: float, bus: Any) -> None:
        self.changes = changes
        self.scope = scope
        self.interval = interval
        self.bus = bus
        self.uri = namespace_uri(scope.namespace)
        self.cursor = 0  # the newest change read
        self.visible = 0  # the newest change the agent may read
        self._periodic = Periodic(self.poll, interval, log,
                                  "following the change log failed; retrying")

    def describe(self) -> str:
        """The resource's text."""
        return json.dumps({"namespace": self.scope.namespace, "agent": self.scope.agent,
                           "cursor": str(self.visible)})

    async def start(self) -> None:
        """Start following from the log's newest change."""
        self.cursor = self.visible = await self.changes.change_head(self.scope.namespace)
        self._periodic.start()

    async def stop(self) -> None:
        """Stop following."""
        await self._periodic.stop()

    def _readable(self, entries: bytes) -> bool:
        agent = self.scope.agent
        return any(e.tier == "semantic" or (e.tier == "episodic" and e.owner == agent)
                   for e in decode_entries(entries))

    async def poll(self) -> bool:
        """Read the changes committed since the last look; True when one the agent may read
        was among them (and the update was published)."""
        from mcp.server.subscriptions import ResourceUpdated

        ns = self.scope.namespace
        if self.cursor < await self.changes.change_floor(ns):
            self.cursor = await self.changes.change_head(ns)  # pruned meanwhile: say so once
            self.visible = self.cursor
            await self.bus.publish(ResourceUpdated(uri=self.uri))
            return True
        seen = False
        while True:
            rows = await self.changes.changes_after(ns, self.cursor, PAGE, PAGE_BYTES)
            for c in rows:
                self.cursor = c.seq
                if self._readable(c.entries):
                    self.visible = c.seq
                    seen = True
            if not rows or (len(rows) < PAGE
                            and sum(len(c.entries) for c in rows) < PAGE_BYTES):
                break
        if seen:
            await self.bus.publish(ResourceUpdated(uri=self.uri))
        return seen
