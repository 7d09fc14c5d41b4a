"""`McpApp`: the MCP server of `a2e-host mcp` with its resources — the store, the scoped
memories over it, the rules lookup — and a lifecycle.

    async with McpApp(config) as app:    # opens the SQLite store of config.store.db
        await app.serve()                # config.mcp.transport: stdio or http

The store is the one the WebSocket host uses (`host.app.make_store`), so both may run on one
file at once; every tool acts as `config.mcp.agent` in `config.mcp.namespace`. `memory_search`
runs on the host's `SearchEngine` with the configured embedder (`[search]`: keywords and
vectors, the relevance scale of `memory/retrieve`); this process embeds what is queued in the
background, as a host does. Given a host's store and its engine (`McpApp(config, host.store,
search=host.search)`), the tools run inside that host, on its engine: the host opens, starts and
closes both.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

from mcp.server.subscriptions import InMemorySubscriptionBus

from host.config import Config
from host.library.entry_store import EntryStoreMemories
from host.lifecycle import Opens, close_after, open_with
from host.mcp.changes import NamespaceFeed
from host.mcp.server import build_server, serve_http, serve_stdio
from host.rules.sync import rules_for
from host.search.embed import make_embedder
from host.search.engine import SearchEngine
from host.store.interface import EntryStore
from host.store.records import Scope

__all__ = ["McpApp"]

log = logging.getLogger("a2e_host.mcp")


class McpApp(Opens):
    """One MCP server on the configured store (or on a running host's: `store` and `search`,
    the host's `SearchEngine` over it). Use `async with` (or `open()`/`close()`)."""

    def __init__(self, config: Config, store: EntryStore | None = None,
                 config_path: str | Path | None = None,
                 search: SearchEngine | None = None) -> None:
        from host.app import make_store

        self.config = config
        self.config_path = config_path  # re-read for the tokens on SIGHUP (HTTP)
        if store is None:
            store = search.store if search is not None else make_store(config)
        self.store = store
        cfg = config.mcp
        scope = Scope(cfg.namespace, cfg.agent)
        # a host's engine (over `store`) is the host's to start and stop; else one of our own
        self.own_search = search is None
        self.search = search if search is not None else SearchEngine(
            self.store, make_embedder(config.search), config.search)
        self.memories = EntryStoreMemories(self.store, scope, config, self.search)
        self.bus = InMemorySubscriptionBus()
        self.feed = NamespaceFeed(self.store, scope, config.watch.poll_interval, self.bus)
        self.server = build_server(
            self.memories, config,
            rules=functools.partial(rules_for, self.store, cfg.namespace),
            subscriptions=self.bus,
            namespace=(self.feed.uri, self.feed.describe),
        )

    async def open(self) -> None:
        """Open (create or migrate) the store, load its vectors and start embedding in the
        background (not inside a host: the host did); follow its change log for the
        namespace."""
        if not self.own_search:  # inside a host: its store and engine are started
            await self.feed.start()
            return
        await open_with(self.store, self.search.start)
        await self.feed.start()

    async def close(self) -> None:
        """Stop following and embedding, commit and close the store (inside a host, only stop
        following: the store and the engine are the host's)."""
        await self.feed.stop()
        if not self.own_search:
            return
        await close_after(self.search.stop, self.store)

    async def serve(self, on_listening: Callable[[int], None] | None = None) -> None:
        """Serve on `config.mcp.transport` until the client leaves (stdio), or SIGTERM/SIGINT.

        `on_listening(port)` is called once the HTTP socket listens (HTTP only).
        """
        if self.config.mcp.transport == "http":
            await serve_http(self.server, self.config, on_listening, self.config_path)
            return
        log.info(
            "MCP server on stdio: namespace %r, agent %r",
            self.config.mcp.namespace, self.config.mcp.agent,
        )
        await serve_stdio(self.server, self.config.limits.max_frame_bytes)
        log.info("MCP client gone; stopping")
