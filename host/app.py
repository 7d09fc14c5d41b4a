"""`Host`: the assembled engine — store, router, memory plugin, server, GC — with a lifecycle.

    host = Host(config)
    await host.start()      # binds; host.port is the real port
    ...
    await host.stop()       # stop accepting, drain, commit, close

The CLI's `serve` and the tests use this same object.
"""

from __future__ import annotations

import logging

from host.config import Config
from host.gc import GarbageCollector
from host.handshake import CoreHandlers
from host.memory.plugin import MemoryPlugin
from host.router import Router
from host.server import HostServer
from host.store.base import EntryStore
from host.store.sqlite import SQLiteEntryStore
from host.store.sqlite_ops import Quotas

__all__ = ["Host", "make_store"]

log = logging.getLogger("a2e_host")


def make_store(config: Config) -> EntryStore:
    """The persistent store the configuration names (SQLite file by default)."""
    limits = config.limits
    quotas = Quotas(
        max_entries_per_namespace=limits.max_entries_per_namespace,
        max_entries_per_agent=limits.max_entries_per_agent,
    )
    return SQLiteEntryStore(config.store.db, quotas=quotas, batch_max=config.store.batch_max)


class Host:
    """One running a2e-host."""

    def __init__(self, config: Config, store: EntryStore | None = None) -> None:
        self.config = config
        self.store = store if store is not None else make_store(config)
        self.router = Router()
        CoreHandlers(self.router).register(self.router)
        self.memory = MemoryPlugin(self.store, config)
        self.memory.register(self.router)
        self.server = HostServer(config, self.router, self.store.ready)
        self.gc = GarbageCollector(self.store, config.gc.interval)

    @property
    def port(self) -> int:
        """The port the server is bound to."""
        return self.server.port

    async def start(self) -> None:
        """Open the store, start the server and the GC."""
        await self.store.open()
        await self.server.start()
        self.gc.start()
        log.info("a2e-host listening on ws://%s:%d", self.config.server.host, self.port)

    async def stop(self) -> None:
        """Stop accepting, drain in-flight requests, stop the GC, commit and close the store."""
        await self.server.stop()
        await self.gc.stop()
        await self.store.close()
        log.info("a2e-host stopped")
