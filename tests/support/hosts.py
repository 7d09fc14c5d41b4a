"""Plain helpers of the tests (conftest.py keeps the fixtures and hooks): a config, a host
running in this process and its URL, a client of it over any transport, the CLI in a
subprocess, an embeddings endpoint's handler. Tests import them from here
(`from support.hosts import make_config, running_host`), as datasette's tests import
`tests/fixtures.py`: pytest does not offer conftest.py as a module to import."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from host.app import Host
from host.client import MemoryClient
from host.config import Config, load_config
from protocol.clock import Clock, wall_clock

BACKENDS: tuple[str, ...] = ("sqlite", "postgres")
TRANSPORTS: tuple[str, ...] = ("websockets", "picows")  # the WebSocket ones (server.transport)
ALL_TRANSPORTS: tuple[str, ...] = (*TRANSPORTS, "http", "stdio")


def make_config(db: Path | str, **sections: dict[str, Any]) -> Config:
    """A config on port 0 with `db` (a SQLite path or a postgresql:// URL), plus overrides.
    The disk reserve is 256 KiB, not 16 MiB: a suite starts a thousand hosts."""
    overrides: dict[str, dict[str, Any]] = {
        "server": {"port": 0}, "store": {"db": str(db), "disk_reserve_bytes": 256 * 1024}}
    for name, values in sections.items():
        overrides.setdefault(name, {}).update(values)
    return load_config(None, overrides)


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


class EmbeddingHandler(BaseHTTPRequestHandler):
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


async def stalled_watcher(host: Host, url: str, watches: int = 16
                          ) -> tuple[Any, socket.socket, str]:
    """A WebSocket connection to `host` (its socket with a 4 KiB receive buffer, at most one
    frame buffered by the client) with a session (agent "s" of namespace "ns") and `watches`
    watches of it, which reads nothing more: what the host sends it waits, in the socket and
    then in the request core. Its `close()` sends the close frame and waits at most 0.5 s for
    the host's (the library's default, 10 s, is waited in full while the host's close frame
    waits behind what the connection did not read), then drops the connection.
    (connection, socket, memory_id)."""
    from websockets.asyncio.client import connect as ws_connect

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", host.port))
    stalled = await ws_connect(url, sock=sock, max_queue=1, max_size=None, compression=None,
                               close_timeout=0.5)
    await stalled.send(json.dumps({"type": "memory/init/req", "id": "i", "version": "1.0",
                                   "namespace": "ns", "scope": {"agent": "s"}}))
    mid = json.loads(await stalled.recv())["memory_id"]
    for i in range(watches):
        await stalled.send(json.dumps({"type": "memory/watch/req", "id": f"w{i}",
                                       "version": "1.0", "memory_id": mid}))
        assert json.loads(await stalled.recv())["type"] == "memory/watch/resp"
    return stalled, sock, mid
