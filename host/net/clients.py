"""The client side of the SDK's transports, for `host.client.MemoryClient`: HTTP + SSE and
stdio, speaking exactly what the A2E SDK's `HTTPTransport` and `SubprocessTransport` speak.

- `HttpChannel`: `POST /session` (no body) -> `{"session_id"}`; every later request carries
  `X-Session-Id`, `Content-Type: text/plain`, `Accept: text/event-stream` and the caller's
  headers; `POST /send` with one JSON message as the body; `GET /stream` read as SSE (`data:`
  lines joined, blank line ends an event, `:` comments skipped, `id:` remembered); a stream
  that ends is opened again with `Last-Event-ID`. `DELETE /session` at close.
- `StdioChannel`: one JSON message a line on the child's stdin, one a line on its stdout;
  closing stdin is the end (the host commits and exits).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HttpChannel", "HttpStatusError", "StdioChannel"]

_LINE_LIMIT = 1 << 26  # bytes of one line a reader takes (the host bounds its messages)


class HttpStatusError(ConnectionError):
    """The host answered an HTTP request with an error status."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body.decode(errors='replace').strip()}")
        self.status = status
        self.body = body


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The chunks of a chunked body."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return
        data = await reader.readexactly(size + 2)
        yield data[:-2]


class HttpChannel:
    """One HTTP + SSE session (see the module docstring)."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        url = urlsplit(base_url)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 80
        self.extra = dict(headers or {})
        self.session_id = ""
        self.last_id: str | None = None  # the id of the last event read
        self.streams = 0  # streams opened so far
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()
        self._queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        self._stream_task: asyncio.Task[None] | None = None
        self._stream_writer: asyncio.StreamWriter | None = None
        self._opened = asyncio.Event()
        self._closing = False

    @classmethod
    async def open(cls, base_url: str, headers: dict[str, str] | None = None) -> HttpChannel:
        """`POST /session`, then open the stream."""
        ch = cls(base_url, headers)
        status, _, body = await ch.request("POST", "/session", b"", session=False)
        if status != 200:
            raise HttpStatusError(status, body)
        ch.session_id = json.loads(body)["session_id"]
        await ch.open_stream()
        return ch

    def _headers(self, session: bool = True) -> dict[str, str]:
        h = {"Host": f"{self.host}:{self.port}"}
        if session:
            h.update({"Content-Type": "text/plain", "Accept": "text/event-stream",
                      "X-Session-Id": self.session_id, **self.extra})
        return h

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: dict[str, str] | None = None,
                      session: bool = True) -> tuple[int, dict[str, str], bytes]:
        """One request on the kept-alive connection: (status, headers, body)."""
        h = {**self._headers(session), **(headers or {}), "Content-Length": str(len(body))}
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        async with self._lock:
            for attempt in (0, 1):  # a kept-alive connection the host closed: once more
                if self._conn is None:
                    self._conn = await asyncio.open_connection(self.host, self.port,
                                                               limit=_LINE_LIMIT)
                reader, writer = self._conn
                try:
                    writer.write(head.encode("latin-1") + b"\r\n" + body)
                    await writer.drain()
                    status, rh = await _read_head(reader)
                    data = await reader.readexactly(int(rh.get("content-length", "0")))
                except (ConnectionError, asyncio.IncompleteReadError):
                    writer.close()
                    self._conn = None
                    if attempt:
                        raise
                    continue
                if rh.get("connection", "").lower() == "close":
                    writer.close()
                    self._conn = None
                return status, rh, data
        raise AssertionError("unreachable")

    async def send(self, text: str) -> None:
        """`POST /send` one message."""
        status, _, body = await self.request("POST", "/send", text.encode())
        if status >= 300:
            raise HttpStatusError(status, body)

    async def open_stream(self, last_event_id: bool = True) -> None:
        """Open the SSE stream (with `Last-Event-ID` of the last event read, unless
        `last_event_id` is False, as the SDK reconnects); returns once the host answered."""
        await self.drop_stream()
        self._opened.clear()
        self._stream_task = asyncio.create_task(self._stream(last_event_id))
        await self._opened.wait()
        if self._stream_task.done() and self._stream_task.exception() is not None:
            raise self._stream_task.exception()  # type: ignore[misc]

    async def drop_stream(self) -> None:
        """Drop the stream's connection now (as a network failure would); no reconnect."""
        task, self._stream_task = self._stream_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        writer, self._stream_writer = self._stream_writer, None
        if writer is not None:
            writer.transport.abort()

    async def _stream(self, last_event_id: bool) -> None:
        reconnect = False
        try:
            while True:
                headers = self._headers()
                if last_event_id and self.last_id is not None:
                    headers["Last-Event-ID"] = self.last_id
                reader, writer = await asyncio.open_connection(self.host, self.port,
                                                               limit=_LINE_LIMIT)
                self._stream_writer = writer
                writer.write(("GET /stream HTTP/1.1\r\n" + "".join(
                    f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode("latin-1"))
                status, rh = await _read_head(reader)
                if status != 200:
                    body = await reader.read(65536)
                    writer.close()
                    raise HttpStatusError(status, body)
                self.streams += 1
                self._opened.set()
                await self._events(reader)
                writer.close()
                if self._closing:
                    break
                reconnect, last_event_id = True, True  # the stream ended: come back for more
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - surfaced to the reader
            if not self._opened.is_set():
                self._opened.set()
                raise
            if not self._closing:
                self._queue.put_nowait(exc if not reconnect else ConnectionError(str(exc)))
            return
        self._queue.put_nowait(None)

    async def _events(self, reader: asyncio.StreamReader) -> None:
        buf = b""
        data: list[str] = []
        async for chunk in _chunks(reader):
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode().rstrip("\r")
                if line == "":
                    if data:
                        self._queue.put_nowait("\n".join(data))
                        data = []
                elif line.startswith(":"):
                    continue
                else:
                    name, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "data":
                        data.append(value)
                    elif name == "id":
                        self.last_id = value

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def close(self) -> None:
        """`DELETE /session` and drop the connections."""
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            await self.request("DELETE", "/session")
        await self.drop_stream()
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None
        self._queue.put_nowait(None)


class StdioChannel:
    """NDJSON over a pair of pipes: a child process's stdin and stdout, or two descriptors."""

    def __init__(self, reader: asyncio.StreamReader, writer: Any,
                 proc: asyncio.subprocess.Process | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.proc = proc

    @classmethod
    async def spawn(cls, argv: list[str], env: dict[str, str] | None = None,
                    stderr: Any = asyncio.subprocess.DEVNULL) -> StdioChannel:
        """Start `argv` with pipes on stdin and stdout."""
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=stderr, env=env, limit=_LINE_LIMIT)
        assert proc.stdout is not None and proc.stdin is not None
        return cls(proc.stdout, proc.stdin, proc)

    @classmethod
    async def over(cls, read_fd: int, write_fd: int) -> StdioChannel:
        """Speak over two pipe descriptors (closed with the channel)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_LINE_LIMIT)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                     os.fdopen(read_fd, "rb", buffering=0))
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
            os.fdopen(write_fd, "wb", buffering=0))
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(reader, writer)

    async def send(self, text: str) -> None:
        """Write one line."""
        self.writer.write(text.encode() + b"\n")
        await self.writer.drain()

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            line = await self.reader.readline()
            if not line:
                return
            text = line.decode().rstrip("\r\n")
            if text:
                yield text

    async def close(self) -> None:
        """Close stdin (the host's EOF) and wait for the child to exit."""
        with contextlib.suppress(ConnectionError, OSError):
            self.writer.close()
        if self.proc is not None:
            await self.proc.wait()
        else:
            self.reader.feed_eof()
