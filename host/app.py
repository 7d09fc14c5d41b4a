"""`Host`: the assembled engine — store, router, memory plugin, server, GC — with a lifecycle.

    host = Host(config)
    await host.start()      # binds; host.port is the real port
    ...
    await host.stop()       # stop accepting, drain, commit, close

The CLI's `serve` and the tests use this same object.
"""

from __future__ import annotations

import logging
from pathlib import Path

from host.auth import Authenticator
from host.config import Config
from host.gc import GarbageCollector
from host.handshake import CoreHandlers
from host.limits import ConnectionLimiter
from host.memory.access import Access
from host.memory.plugin import MemoryPlugin
from host.router import Router
from host.server import HostServer
from host.store.base import EntryStore
from host.store.postgres import PostgresEntryStore, is_postgres_url
from host.store.sqlite import SQLiteEntryStore
from host.store.sqlite_ops import Quotas

__all__ = ["Host", "make_store"]

log = logging.getLogger("a2e_host")


def make_store(config: Config) -> EntryStore:
    """The persistent store the configuration names: PostgreSQL for a `postgresql://` URL
    (needs the `postgres` extra), else a SQLite file (the default)."""
    limits = config.limits
    quotas = Quotas(
        max_entries_per_namespace=limits.max_entries_per_namespace,
        max_entries_per_agent=limits.max_entries_per_agent,
        max_bytes_per_namespace=limits.max_bytes_per_namespace,
        max_bytes_per_agent=limits.max_bytes_per_agent,
    )
    if is_postgres_url(config.store.db):
        return PostgresEntryStore(config.store.db, quotas=quotas, pool_max=config.store.pool_size)
    return SQLiteEntryStore(config.store.db, quotas=quotas, batch_max=config.store.batch_max)


class Host:
    """One running a2e-host. `config_path` is the file `auth.reload()` re-reads tokens from."""

    def __init__(
        self, config: Config, store: EntryStore | None = None,
        config_path: str | Path | None = None,
    ) -> None:
        self.config = config
        self.store = store if store is not None else make_store(config)
        self.auth = Authenticator(config.auth, config_path)
        self.router = Router()
        CoreHandlers(self.router, self.auth).register(self.router)
        self.memory = MemoryPlugin(self.store, config, Access(self.auth))
        self.memory.register(self.router)
        self.server = HostServer(config, self.router, self.store.ready)
        self.server.gates += [self.auth.upgrade_gate, ConnectionLimiter(config.limits).gate]
        self.server.on_open.append(lambda c: self.auth.attach(c.ctx, c.ws.request))
        self.gc = GarbageCollector(self.store, config.gc.interval)

    @property
    def port(self) -> int:
        """The port the server is bound to."""
        return self.server.port

    async def start(self) -> None:
        """Open the store, start the server and the GC. Raises `ValueError` for a non-loopback
        address without authentication (see `Authenticator.check_exposure`)."""
        srv = self.config.server
        self.auth.check_exposure(srv.host, self.config.auth.allow_anonymous_remote)
        await self.store.open()
        await self.server.start()
        self.gc.start()
        scheme = "wss" if srv.tls_cert else "ws"
        log.info("a2e-host listening on %s://%s:%d (authentication %s)", scheme, srv.host,
                 self.port, "on" if self.auth.enabled else "off")

    async def stop(self) -> None:
        """Stop accepting, drain in-flight requests, stop the GC, commit and close the store."""
        await self.server.stop()
        await self.gc.stop()
        await self.store.close()
        log.info("a2e-host stopped")
