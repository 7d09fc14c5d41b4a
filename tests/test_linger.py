"""A lingering close, over real sockets on both WebSocket transports: a frame over the limit
gets the client the 1009 close frame and its reason, never a TCP reset, however the client
sends it; and a client that keeps sending after it cannot hold the connection."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from authkit import running
from rawws import CLOSE, RawWebSocket

from host.net.linger import LINGER_BYTES

pytestmark = pytest.mark.all_transports("websocket")

MIB = 1024 * 1024
TRIES = 12
_CHUNK = 256 * 1024


def _head(size: int) -> bytes:
    """The head of one masked text frame of `size` bytes, with a zero mask key (so the payload
    goes as it is: no masking of megabytes in Python)."""
    return bytes((0x81, 0x80 | 127)) + struct.pack("!Q", size) + b"\0\0\0\0"


def _send(ws: RawWebSocket, size: int, slowly: bool) -> None:
    """Send a text frame of `size` bytes: in one call, or in pieces with pauses between."""
    if not slowly:
        ws.send_raw(_head(size) + b"x" * size)
        return
    ws.send_raw(_head(size))
    piece = b"x" * _CHUNK
    for _ in range(size // _CHUNK):
        ws.send_raw(piece)
        time.sleep(0.002)


def _try(port: int, size: int, slowly: bool) -> str:
    """One try: what the client read after its frame ("1009 <reason>", or the error)."""
    ws = RawWebSocket(port)
    try:
        _send(ws, size, slowly)
        opcode, payload = ws.recv()
        if opcode != CLOSE:
            return f"opcode {opcode}"
        return f"{struct.unpack('!H', payload[:2])[0]} {payload[2:].decode()}"
    except OSError as exc:  # a reset shows here: in the send or in the read
        return type(exc).__name__
    finally:
        ws.close()


@pytest.mark.parametrize("size, slowly", [(8 * MIB, False), (8 * MIB, True), (32 * MIB, False)],
                         ids=["8MiB-at-once", "8MiB-slowly", "32MiB-at-once"])
async def test_a_frame_over_the_limit_always_gets_its_close_frame(
    db_path: Path, transport: str, size: int, slowly: bool
) -> None:
    """A frame over `limits.max_frame_bytes` (1 MiB) gets the client the 1009 close frame and
    its reason in every one of 12 tries, sent in one write or slowly, never a reset."""
    async with running(db_path, transport=transport) as host:
        got = [await asyncio.to_thread(_try, host.port, size, slowly) for _ in range(TRIES)]
    refused = [g for g in got if not g.startswith("1009 ")]
    assert not refused, f"{len(refused)} of {TRIES}: {refused}"
    assert all(len(g) > len("1009 ") for g in got)  # with a reason


async def test_a_served_host_on_uvloop_lingers_too(host_process: Any, tmp_path: Path) -> None:
    """`a2e-host serve` (on uvloop when installed, as in production): an 8 MiB frame over the
    limit gets its 1009 close frame in every one of 12 tries."""
    hp = host_process(tmp_path / "a2e.db")
    port = hp.port
    got = [await asyncio.to_thread(_try, port, 8 * MIB, False) for _ in range(TRIES)]
    refused = [g for g in got if not g.startswith("1009 ")]
    assert not refused, f"{len(refused)} of {TRIES}: {refused}"


def _flood(port: int, pace: float) -> int:
    """After a frame head over the limit, send until the host ends the connection (a byte
    every `pace` s, or as fast as it goes when 0): the bytes sent. The socket's timeout is 60 s:
    a host that never ends it fails the test, it does not hang."""
    ws = RawWebSocket(port, timeout=60.0)
    sent = 0
    try:
        ws.send_raw(_head(1 << 40))
        data = b"x" * (_CHUNK if not pace else 1)
        while True:
            sent += ws.sock.send(data)
            if pace:
                time.sleep(pace)
    except TimeoutError:
        raise AssertionError("the host never ended the connection") from None
    except ConnectionError:
        return sent
    finally:
        ws.close()


@pytest.mark.parametrize("pace", [0.0, 0.05], ids=["fast", "a-byte-at-a-time"])
async def test_a_client_that_keeps_sending_cannot_hold_the_connection(
    db_path: Path, transport: str, pace: float
) -> None:
    """A client that never stops sending after its frame over the limit is cut off: past the
    linger's byte bound when it sends fast, past its time bound when it trickles; the host
    then holds no connection of it."""
    async with running(db_path, transport=transport) as host:
        sent = await asyncio.to_thread(_flood, host.port, pace)
        await _until(lambda: not host.server.connections)
    # what the kernels' buffers held on top of the bound, at most a few MiB each way
    assert sent < LINGER_BYTES + 32 * MIB


async def _until(done: Callable[[], Any]) -> None:
    async with asyncio.timeout(30):
        while not done():
            await asyncio.sleep(0.01)


def _post(port: int, size: int, slowly: bool) -> str:
    """One POST with a body of `size` bytes: the status line the client read, or the error."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10.0)
    head = (f"POST /send HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Session-Id: none\r\n"
            f"Content-Type: text/plain\r\nContent-Length: {size}\r\n\r\n").encode()
    try:
        sock.sendall(head)
        piece = b"x" * (_CHUNK if slowly else size)
        for _ in range(size // len(piece)):
            sock.sendall(piece)
            if slowly:
                time.sleep(0.002)
        got = b""
        while b"\r\n" not in got:
            more = sock.recv(4096)
            if not more:
                return f"closed after {got!r}"
            got += more
        return got.split(b"\r\n", 1)[0].decode()
    except OSError as exc:
        return type(exc).__name__
    finally:
        sock.close()


@pytest.mark.parametrize("slowly", [False, True], ids=["at-once", "slowly"])
async def test_a_body_over_the_limit_always_gets_its_413(db_path: Path, slowly: bool) -> None:
    """A POST whose 8 MiB body is over `limits.max_frame_bytes` gets the client the 413 in
    every one of 12 tries (the host reads no more of it, and closes without a reset)."""
    async with running(db_path) as host:
        got = [await asyncio.to_thread(_post, host.port, 8 * MIB, slowly) for _ in range(TRIES)]
    refused = [g for g in got if g != "HTTP/1.1 413 Request Entity Too Large"]
    assert not refused, f"{len(refused)} of {TRIES}: {refused}"
