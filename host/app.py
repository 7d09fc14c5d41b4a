"""`Host`: the assembled engine — store, router, memory plugin, server, GC — with a lifecycle.

    host = Host(config)
    await host.start()      # binds; host.port is the real port
    ...
    await host.stop()       # stop accepting, drain, commit, close

The CLI's `serve` and the tests use this same object. It also serves `GET /metrics`
(Prometheus text) and applies a re-read configuration (`reload()`, on SIGHUP).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path

from pydantic import BaseModel

from host import __version__
from host.config import Config, mask_value
from host.config.search import SearchConfig, wait_within
from host.core.auth import Authenticator
from host.core.handshake import CoreHandlers
from host.core.router import Router
from host.memory.access import Access
from host.memory.plugin import MemoryPlugin
from host.memory.session import sessions_of, working_entries
from host.net.gates import bearer_gate, session_gate
from host.net.http import HttpReply, HttpRequest, get_only
from host.net.server import HostServer
from host.ops.gc import GarbageCollector
from host.ops.logs import RequestLog
from host.ops.metrics import CONTENT_TYPE, EntryCounts, HostGauges, Metrics
from host.ops.threads import blas_threads
from host.ops.usage import QuotaUsage
from host.search.embed import make_embedder
from host.search.engine import SearchEngine
from host.store.history import Retention
from host.store.interface import EntryStore, NotReadyReason
from host.store.postgres.schema import explain_open_error
from host.store.postgres.store import PostgresEntryStore, is_postgres_url
from host.store.records import Quotas
from host.store.sqlite.files import FileState
from host.store.sqlite.store import SQLiteEntryStore
from host.store.sqlite.writer import CommitObserver
from host.ui import UiApp, UiDeps
from host.ui.mount import route as ui_route
from protocol.clock import Clock, wall_clock

__all__ = ["AddressInUse", "Host", "RELOADABLE", "make_store", "open_store", "quotas_of"]

# Config sections a running host applies on reload (auth through `Authenticator.reload`);
# a change anywhere else needs a restart.
RELOADABLE: frozenset[str] = frozenset({"limits", "log", "auth"})
# Settings of reloadable sections that are fixed when the server binds or a connection opens.
_FIXED_AT_START: frozenset[str] = frozenset({"limits.max_frame_bytes"})

log = logging.getLogger("a2e_host")


def quotas_of(config: Config) -> Quotas:
    """The persisted-entry quotas of `config.limits`."""
    limits = config.limits
    return Quotas(
        max_entries_per_namespace=limits.max_entries_per_namespace,
        max_entries_per_agent=limits.max_entries_per_agent,
        max_bytes_per_namespace=limits.max_bytes_per_namespace,
        max_bytes_per_agent=limits.max_bytes_per_agent,
        evict=limits.on_full == "evict",
        importance_half_life=config.ranking.importance_half_life,
    )


class AddressInUse(ValueError):
    """The address the host should listen on is taken (the message names it and the fix)."""


def make_store(config: Config, observer: CommitObserver | None = None, *, create: bool = True,
               adopt: bool = False) -> EntryStore:
    """The persistent store the configuration names: PostgreSQL for a `postgresql://` URL
    (needs the `postgres` extra), else a SQLite file (the default).

    `observer(operations, seconds)` is told of each SQLite group commit (the commit metrics).
    A SQLite file that does not exist is created unless `create` is False; another
    application's SQLite file is refused unless `adopt` (`files.check_file`).
    """
    if is_postgres_url(config.store.db):
        return PostgresEntryStore(config.store.db, quotas=quotas_of(config),
                                  pool_max=config.store.pool_size,
                                  batch_max=config.store.batch_max,
                                  max_term_docs=config.search.max_term_docs,
                                  max_matches=config.search.max_keyword_matches)
    return SQLiteEntryStore(config.store.db, quotas=quotas_of(config),
                            batch_max=config.store.batch_max, observer=observer,
                            max_term_docs=config.search.max_term_docs,
                            max_matches=config.search.max_keyword_matches,
                            disk_reserve_bytes=config.store.disk_reserve_bytes,
                            create=create, adopt=adopt)


async def open_store(store: EntryStore, config: Config) -> None:
    """`store.open()`; a PostgreSQL server that cannot be reached, or refuses the login or the
    database, is an `UnreachableDatabase` naming the URL (password masked) and the fix."""
    try:
        await store.open()
    except Exception as exc:
        if isinstance(store, PostgresEntryStore) and (
                err := explain_open_error(mask_value(config.store.db), exc)) is not None:
            raise err from None
        raise
    h = config.history  # the `history` settings, for every writer of the database
    await store.set_history_retention(Retention(h.keep, h.days * 86_400.0, h.max_retired))


def _hostport(host: str) -> str:
    """`host` as the host part of a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def _index_stats(search: SearchEngine) -> Callable[[], dict[str, int]] | None:
    """The figures of the search's in-memory vector indexes for /metrics: the host's own
    (SQLite, with the client spaces), else the client spaces' alone (PostgreSQL)."""
    if search.vectors is not None:
        return search.vectors.stats
    return search.spaces.indexes.stats if search.spaces is not None else None


def _changed(old: BaseModel, new: BaseModel, section: str) -> list[str]:
    return [f"{section}.{f}" for f in type(new).model_fields if getattr(old, f) != getattr(new, f)]


class Host:
    """One running a2e-host. `config_path` is the file `auth.reload()` re-reads tokens from."""

    def __init__(
        self, config: Config, store: EntryStore | None = None,
        config_path: str | Path | None = None, clock: Clock = wall_clock, adopt: bool = False,
    ) -> None:
        self.config = config
        self.clock = clock  # the time of TTL, recency and collection (tests move it on)
        self.metrics = Metrics()
        self.store = store if store is not None else make_store(
            config, self.metrics.commit, adopt=adopt)
        # the optional capability the host itself reads, checked once (host/store/interface.py)
        self._not_ready = self.store if isinstance(self.store, NotReadyReason) else None
        self.auth = Authenticator(config.auth, config_path)
        self.router = Router()
        CoreHandlers(self.router, self.auth).register(self.router)
        # the engine's own copy: a query waits for its vectors inside its request's deadline
        search = config.search.model_copy()
        self._wait_within_deadline(config, search)
        self.reload_hooks: list[Callable[[Config], None]] = [
            lambda c: self._wait_within_deadline(c, search)]
        self.search = SearchEngine(
            self.store, make_embedder(config.search), search,
            busy=self._requests_waiting, on_batch=self.metrics.embedded)
        self.memory = MemoryPlugin(self.store, config, Access(self.auth), self.search, clock)
        self.memory.register(self.router)
        self._request_log = RequestLog(lambda: self.config.log)
        self.gc = GarbageCollector(self.store, config.gc.interval, clock)
        self.gc.after.append(self.memory.watches.collected)
        # tenants' usage against their quotas: /metrics, a warning at 80 % (docs/growth.md)
        self.usage = QuotaUsage(self.store, lambda: quotas_of(self.config))
        self.gc.after.append(self.usage.check)
        self.metrics.registry.register(self.usage.collector())
        self._entry_counts = EntryCounts(self._count_entries)
        self.metrics.add_gauges(HostGauges(
            connections_open=self._connections_by_transport,
            connections_total=lambda: self.server.accepted,
            in_flight=lambda: sum(c.in_flight for c in self.server.connections),
            gc_deleted=lambda: self.gc.deleted_total,
            entries=self._entries_by_tier,
            embed_backlog=(lambda: self.search.backlog) if self.search.enabled else None,
            embed_faults=self._embed_faults if self.search.enabled else None,
            watches=lambda: (self.memory.watches.count, self.memory.watches.events_sent,
                             self.memory.watches.ended),
            vectors=_index_stats(self.search),
            blas_threads=blas_threads,
            reads_dropped=(lambda: self.memory.reads.dropped) if self.memory.reads.enabled
            else None,
        ))
        self.ui: UiApp | None = None  # the memory browser at /ui (docs/ui.md)
        if config.ui.enabled:
            self.ui = UiApp(UiDeps(
                config=config, auth=self.auth, store=self.store, memory=self.memory,
                metrics=self.metrics, gc=self.gc,
                connections=lambda: len(self.server.connections),
                in_flight=lambda: sum(c.in_flight for c in self.server.connections),
                working=self._working_by_namespace, clock=clock,
            ))
        # the host's routes and gates, given to the server in one place
        self.server = HostServer(
            config, self.router, self.store.ready, self._on_request,
            routes={"/metrics": get_only(self._metrics_route),
                    "/readyz": get_only(self._readyz_route),
                    "/healthz": get_only(self._healthz_route)},
            prefix_routes={} if self.ui is None else {
                "/ui": ui_route(self.ui, secure=bool(config.server.tls_cert))},
            gates=[bearer_gate(self.auth)], session_checks=[session_gate(self.auth)],
            on_open=[lambda c: self.auth.attach(c.ctx, c.upgrade.headers.get("Authorization"))],
            step=self.store.reads_on_loop)

    def _requests_waiting(self) -> bool:
        """True while a request of any connection is read but not answered."""
        return any(c.in_flight for c in self.server.connections)

    def _on_request(self, conn_id: str, req_id: str, msg_type: str, code: str, s: float) -> None:
        self.metrics.request(msg_type, code, s)
        self._request_log(conn_id, req_id, msg_type, code, s)

    async def _count_entries(self, now: float) -> dict[str, int]:
        return await self.store.count_by_tier(now)

    def _connections_by_transport(self) -> dict[str, int]:
        counts = dict.fromkeys(("websocket", "http", "stdio"), 0)
        for c in self.server.connections:
            counts[c.kind] = counts.get(c.kind, 0) + 1
        return counts

    def _embed_faults(self) -> dict[str, int]:
        return self.search.worker.faults() if self.search.worker is not None else {}

    def _entries_by_tier(self) -> dict[str, int]:
        counts = self._entry_counts()
        counts["working"] = sum(working_entries(c.ctx) for c in self.server.connections)
        return counts

    def _working_by_namespace(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.server.connections:
            sessions = sessions_of(c.ctx)
            for s in sessions.by_id.values() if sessions is not None else ():
                ns = s.scope.namespace
                counts[ns] = counts.get(ns, 0) + len(s.working)
        return counts

    def _healthz_route(self, request: HttpRequest) -> HttpReply:
        """200 while the process runs: `ok`, or to a request that accepts JSON (`Accept:
        application/json`) `{"status": "ok", "version": ...}`."""
        if "application/json" in (request.headers.get("Accept") or ""):
            return HttpReply(HTTPStatus.OK, json.dumps({"status": "ok", "version": __version__}),
                             {"Content-Type": "application/json"})
        return HttpReply(HTTPStatus.OK, "ok\n")

    async def _readyz_route(self, request: HttpRequest) -> HttpReply:
        """The server's readiness answer, with the embedding backlog when ready."""
        reply = await self.server.readyz(request)
        if reply.status != HTTPStatus.OK and self._not_ready is not None and (
                text := self._not_ready.not_ready_reason()):  # SQLite: a full disk
            return HttpReply(reply.status, f"store not ready: {text}\n", reply.headers)
        if reply.status == HTTPStatus.OK and self.search.enabled:
            backlog = await self.search.count_backlog()
            body = reply.payload().decode()
            reply = HttpReply(reply.status, f"{body}embed_backlog {backlog}\n", reply.headers)
        return reply

    async def _metrics_route(self, request: HttpRequest) -> HttpReply:
        await self._entry_counts.refresh()
        await self.usage.refresh()
        if self.search.enabled:
            await self.search.count_backlog()
        return HttpReply(HTTPStatus.OK, self.metrics.render().decode(),
                         {"Content-Type": CONTENT_TYPE})

    @staticmethod
    def _wait_within_deadline(config: Config, search: SearchConfig) -> None:
        """`search.vector_wait` from `config`'s, at most half its request deadline (limits
        reload: at a reload too), with a warning when that is less."""
        search.vector_wait = wait_within(config.search.vector_wait,
                                         config.limits.request_timeout)
        if search.vector_wait < config.search.vector_wait:
            log.warning("search.vector_wait %.1f s is over half limits.request_timeout (%.1f s):"
                        " a query waits %.1f s at most for its vectors",
                        config.search.vector_wait, config.limits.request_timeout,
                        search.vector_wait)

    def reload(self, new: Config) -> list[str]:
        """Apply `new`'s limits and log sections to the running host, in place, so open
        connections see them at their next request; re-read the tokens (`auth.reload()`).

        Returns the changed settings that take effect only at a restart. Raises `ValueError`
        when the tokens cannot be reloaded; the limits and log are applied even then.
        """
        restart: list[str] = []
        for name in type(new).model_fields:
            old_section, new_section = getattr(self.config, name), getattr(new, name)
            if old_section == new_section or not isinstance(new_section, BaseModel):
                continue
            changed = _changed(old_section, new_section, name)
            if name not in RELOADABLE:
                restart += changed
                continue
            if name == "auth":  # the Authenticator re-reads its tokens below
                restart += [c for c in changed if c != "auth.tokens"]
                continue
            restart += [c for c in changed if c in _FIXED_AT_START]
            for field in type(new_section).model_fields:  # in place: holders see the change
                setattr(old_section, field, getattr(new_section, field))
        self.store.quotas = quotas_of(self.config)
        for hook in self.reload_hooks:
            hook(self.config)
        self.auth.reload()
        return restart

    @property
    def port(self) -> int:
        """The port the server is bound to."""
        return self.server.port

    async def start(self, listen: bool = True) -> None:
        """Open the store, start the server and the GC. Raises `ValueError` for a non-loopback
        address without authentication (see `Authenticator.check_exposure`). With `listen`
        False no port is bound (`a2e-host stdio` gives the server its one connection)."""
        srv = self.config.server
        if listen:
            self.auth.check_exposure(srv.host, self.config.auth.allow_anonymous_remote)
        try:
            await open_store(self.store, self.config)
            await self.search.start()
            await self.server.start(listen)
            self.gc.start()
            if self.ui is not None:
                await self.ui.start()
            await self.memory.watches.start()
        except BaseException as exc:  # e.g. a TLS key that does not match: undo what started
            with contextlib.suppress(Exception):
                await self.stop(quiet=True)
            if isinstance(self.store, SQLiteEntryStore):  # a database created now goes again
                await self.store.discard()
            if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
                raise AddressInUse(
                    f"cannot listen on {srv.host}:{srv.port}: the address is already in use"
                    " (another a2e-host?): stop that process, or choose another --port"
                    " (0 picks a free one)") from None
            raise
        if not listen:
            return
        for line in self.startup_lines():
            log.info("%s", line)

    def startup_lines(self) -> list[str]:
        """What `serve` logs once it listens: the address, the database it opened (absolute
        path, and whether it was new), the memory browser's address when it is on."""
        srv = self.config.server
        tls = bool(srv.tls_cert)
        lines = [
            f"a2e-host {__version__} listening on {'wss' if tls else 'ws'}://{_hostport(srv.host)}"
            f":{self.port} ({srv.transport} transport, HTTP + SSE on the same port,"
            f" authentication {'on' if self.auth.enabled else 'off'})",
            f"database: {self._database_said()}",
        ]
        if self.ui is not None:
            lines.append(f"memory browser: {'https' if tls else 'http'}://{_hostport(srv.host)}"
                         f":{self.port}/ui")
        return lines

    def _database_said(self) -> str:
        if not isinstance(self.store, SQLiteEntryStore):
            return f"{mask_value(self.config.store.db)} (PostgreSQL)"
        found = self.store.found
        state = ("existing" if found is None or not found.new else
                 "adopted: the host's tables added beside the others"
                 if found is FileState.ADOPTED else "new")
        return f"{os.path.abspath(self.store.path)} ({state})"

    async def stop(self, quiet: bool = False) -> None:
        """End the watches (each told its last cursor), stop accepting, drain in-flight
        requests, stop the GC, commit and close the store."""
        await self.memory.watches.stop()
        await self.server.stop()
        if self.ui is not None:
            await self.ui.stop()
        await self.gc.stop()
        await self.search.stop()
        await self.memory.reads.close()  # the read times noted, before the store closes
        await self.store.close()
        if not quiet:
            log.info("a2e-host stopped")
