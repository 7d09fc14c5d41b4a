"""The daemon as a real process: SIGTERM drains in-flight requests, SIGHUP reloads limits
without dropping connections, logs are JSON lines without entry content."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from authkit import issue, write_config
from rawws import TEXT, frame
from support.procs import HostProcess
from websockets.exceptions import ConnectionClosed

from host.client import MemoryClient, RemoteError

pytestmark = pytest.mark.all_transports("websocket")


async def test_sigterm_answers_in_flight_requests_and_exits_0(host_process, tmp_path: Path) -> None:
    """Requests in flight when SIGTERM arrives are answered and durable; the process exits 0;
    requests the host did not read fail with a clean close (1001), never a wrong answer."""
    db = tmp_path / "t.db"
    hp: HostProcess = host_process(db)
    client = await MemoryClient.connect(hp.url)
    await client.init("ns", {"agent": "a"})
    answered_at: dict[int, float] = {}

    async def store(i: int) -> None:
        await client.store([{"key": {"r": i, "e": j}, "content": "x" * 200, "tier": "episodic"}
                            for j in range(100)])
        answered_at[i] = time.monotonic()

    tasks = [asyncio.create_task(store(i)) for i in range(100)]
    while not answered_at:
        await asyncio.sleep(0.001)
    signalled = time.monotonic()
    hp.proc.send_signal(signal.SIGTERM)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    code = await asyncio.to_thread(hp.proc.wait, 30)
    assert code == 0, hp.proc.stderr.read().decode()  # type: ignore[union-attr]
    failures = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(f, (ConnectionClosed, ConnectionError)) for f in failures), failures
    assert any(t > signalled for t in answered_at.values())  # answered after the signal
    await client.close()

    again: HostProcess = host_process(db)  # every answered store is durable
    c = await MemoryClient.connect(again.url)
    await c.init("ns", {"agent": "a"})
    for i in answered_at:
        got = await c.retrieve(keys=[{"r": i, "e": 99}])
        assert len(got.entries) == 1, i
    await c.close()
    assert again.stop(signal.SIGTERM) == 0


async def test_sighup_reloads_limits_without_dropping_connections(
    host_process, tmp_path: Path
) -> None:
    """After SIGHUP a changed limit applies to an open connection and its session; a wrong new
    value is refused and the running limits stay."""
    cfg = tmp_path / "a2e.toml"
    cfg.write_text("[limits]\nmax_entries_per_request = 5\n")
    hp: HostProcess = host_process(tmp_path / "h.db", "--config", str(cfg))
    client = await MemoryClient.connect(hp.url)
    await client.init("ns", {"agent": "a"})
    three = [{"key": {"k": i}, "content": i, "tier": "episodic"} for i in range(3)]
    await client.store(three)

    cfg.write_text("[limits]\nmax_entries_per_request = 2\n")
    hp.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while True:  # the reload lands asynchronously: poll until the new limit answers
        try:
            await client.store(three)
        except RemoteError as err:
            assert err.code == "invalid_message"
            break
        assert time.monotonic() < deadline, "limit not reloaded"
        await asyncio.sleep(0.05)
    assert (await client.store(three[:2])).stored  # same connection, same session

    cfg.write_text("[limits]\nmax_entries_per_request = 0\n")  # invalid: refused
    hp.proc.send_signal(signal.SIGHUP)
    await asyncio.sleep(0.3)
    assert hp.proc.poll() is None
    assert (await client.store(three[:2])).stored
    await client.close()
    assert hp.stop(signal.SIGTERM) == 0
    log = hp.proc.stderr.read().decode()  # type: ignore[union-attr]
    assert "configuration reloaded" in log and "limits.max_entries_per_request" in log


async def test_logs_are_json_lines_without_content(host_process, tmp_path: Path) -> None:
    """Piped stderr gets one JSON object a line; requests at DEBUG carry connection id,
    request id, type, duration and outcome; entry content never appears."""
    cfg = tmp_path / "a2e.toml"
    cfg.write_text('[log]\nlevel = "DEBUG"\n')
    hp: HostProcess = host_process(tmp_path / "l.db", "--config", str(cfg))
    client = await MemoryClient.connect(hp.url)
    await client.init("ns", {"agent": "a"})
    await client.store([{"key": {"secret-key-1": 1}, "content": "secret-content-xyz",
                         "tier": "episodic"}])
    await client.retrieve(query="secret-content-xyz")
    await client.close()
    assert hp.stop(signal.SIGTERM) == 0
    text = hp.proc.stderr.read().decode()  # type: ignore[union-attr]
    assert "secret-content-xyz" not in text and "secret-key-1" not in text
    records = [json.loads(line) for line in text.splitlines()]
    requests = [r for r in records if r["msg"] == "request"]
    assert {r["type"] for r in requests} >= {"memory/init/req", "memory/store/req",
                                             "memory/retrieve/req"}
    for r in requests:
        assert r["conn"].startswith("c") and r["req"] and r["outcome"] == "ok"
        assert r["duration_ms"] >= 0 and r["level"] == "debug"
    assert any("listening" in r["msg"] for r in records)


async def test_no_request_lines_at_info(host_process, tmp_path: Path) -> None:
    """At the default INFO level a request writes no log line (the hot path stays quiet)."""
    hp: HostProcess = host_process(tmp_path / "q.db")
    client = await MemoryClient.connect(hp.url)
    await client.init("ns", {"agent": "a"})
    for i in range(20):
        await client.store([{"key": {"k": i}, "content": i, "tier": "episodic"}])
    await client.close()
    assert hp.stop(signal.SIGTERM) == 0
    records = [json.loads(x) for x in hp.proc.stderr.read().decode().splitlines()]  # type: ignore[union-attr]
    assert not [r for r in records if r["msg"] == "request"]
    assert len(records) < 10


async def test_sighup_reloads_tokens(host_process, tmp_path: Path) -> None:
    """SIGHUP re-reads the tokens: a dropped token's open connection is refused on its next
    request while another token's connection goes on."""
    t1, s1 = issue("a1")
    t2, s2 = issue("a2")
    db = tmp_path / "tok.db"
    cfg = write_config(tmp_path / "host.toml", db, [s1, s2])
    hp: HostProcess = host_process(db, "--config", str(cfg))
    c1 = await MemoryClient.connect(hp.url, additional_headers={"Authorization": f"Bearer {t1}"})
    c2 = await MemoryClient.connect(hp.url, additional_headers={"Authorization": f"Bearer {t2}"})
    for c in (c1, c2):
        await c.init("ns")
    write_config(cfg, db, [s2])
    hp.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while True:
        try:
            await c1.retrieve(keys=[{"k": 1}])
        except RemoteError as err:
            assert err.code == "unauthorized"
            break
        assert time.monotonic() < deadline, "tokens not reloaded"
        await asyncio.sleep(0.05)
    assert (await c2.store([{"key": {"k": 1}, "content": 1, "tier": "episodic"}])).stored
    for c in (c1, c2):
        await c.close()
    assert hp.stop(signal.SIGTERM) == 0


def _stalled_client(port: int) -> socket.socket:
    """A WebSocket client with a tiny receive buffer that pipelines big reads and never reads
    a reply: the host's send buffer for it fills up."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    msgs = [{"type": "memory/init/req", "id": "i", "version": "1.0", "namespace": "n"}]
    msgs += [{"type": "ping", "id": f"p{i}", "version": "1.0", "metadata": "x" * 60_000}
             for i in range(100)]  # about 6 MB of requests: their replies fill every buffer
    s.setblocking(False)
    data = b"".join(frame(TEXT, json.dumps(m).encode()) for m in msgs)
    deadline = time.monotonic() + 5
    while data and time.monotonic() < deadline:  # the host stops reading it: stop sending
        try:
            data = data[s.send(data):]
        except BlockingIOError:
            time.sleep(0.01)
    return s


async def test_sigterm_exits_within_drain_timeout_whatever_a_client_does(
    host_process, tmp_path: Path
) -> None:
    """A client that pipelines requests and never reads a reply does not hold up SIGTERM: the
    host drops it at server.drain_timeout and exits 0 while that client is still connected."""
    cfg = tmp_path / "a2e.toml"
    cfg.write_text("[server]\ndrain_timeout = 0.5\n")
    hp: HostProcess = host_process(tmp_path / "d.db", "--config", str(cfg))
    stalled = await asyncio.to_thread(_stalled_client, hp.port)
    try:
        signalled = time.monotonic()
        hp.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(hp.proc.wait, 30)
        took = time.monotonic() - signalled
        assert code == 0, hp.proc.stderr.read().decode()  # type: ignore[union-attr]
        assert took < 0.5 + 8.0, f"exit took {took:.1f} s"  # the drain bound, plus the commit
    finally:
        stalled.close()
