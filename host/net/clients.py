"""The client side of the SDK's transports, for `host.client.MemoryClient`: HTTP + SSE and
stdio, speaking exactly what the A2E SDK's `HTTPTransport` and `SubprocessTransport` speak.

- `HttpChannel` (HTTP/1.1 through h11's client `Connection`: parsing, keep-alive, chunked
  bodies; a header value with CR LF is refused, not sent): `POST /session` (no body; the
  caller's headers, where the SDK sends none) -> `{"session_id"}`; every later request carries
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

import h11

__all__ = ["HttpChannel", "HttpStatusError", "StdioChannel"]

_LINE_LIMIT = 1 << 26  # bytes of one line a reader takes (the host bounds its messages)
_READ = 1 << 16  # bytes read from a socket at a time


class HttpStatusError(ConnectionError):
    """The host answered an HTTP request with an error status."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body.decode(errors='replace').strip()}")
        self.status = status
        self.body = body


async def _next(reader: asyncio.StreamReader, conn: h11.Connection) -> Any:
    """The next h11 event of a response, reading the socket as h11 needs."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await reader.read(_READ))  # b"": the host closed (h11 says so)


async def _response(reader: asyncio.StreamReader,
                    conn: h11.Connection) -> tuple[int, dict[str, str]]:
    """Read up to a final response's head: (status, headers with lower-case names)."""
    while True:
        event = await _next(reader, conn)
        if isinstance(event, h11.Response):
            headers = {n.decode("latin-1"): v.decode("latin-1") for n, v in event.headers}
            return event.status_code, headers
        if isinstance(event, h11.ConnectionClosed):
            raise ConnectionError("the host closed the connection")
        # an informational response (100 Continue): the final one follows


async def _body(reader: asyncio.StreamReader, conn: h11.Connection) -> AsyncIterator[bytes]:
    """The body of the response whose head was read, as it comes (chunked or not)."""
    while True:
        event = await _next(reader, conn)
        if isinstance(event, h11.Data):
            yield bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return
        else:
            raise ConnectionError("the host closed the connection mid-response")


async def _whole_body(reader: asyncio.StreamReader, conn: h11.Connection) -> bytes:
    out = bytearray()
    async for part in _body(reader, conn):
        out += part
        if len(out) > _LINE_LIMIT:
            raise ConnectionError(f"a response body over {_LINE_LIMIT} bytes")
    return bytes(out)


def _request(conn: h11.Connection, method: str, path: str, headers: dict[str, str],
             body: bytes = b"") -> bytes:
    """The bytes of one request through h11 (which refuses a header value with CR LF)."""
    out = conn.send(h11.Request(method=method, target=path, headers=list(headers.items())))
    if body:
        out = (out or b"") + (conn.send(h11.Data(data=body)) or b"")
    return (out or b"") + (conn.send(h11.EndOfMessage()) or b"")


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
        self._h11 = h11.Connection(h11.CLIENT)  # the kept-alive connection's HTTP state
        self._lock = asyncio.Lock()
        self._queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        self._stream_task: asyncio.Task[None] | None = None
        self._stream_writer: asyncio.StreamWriter | None = None
        self._opened = asyncio.Event()
        self._closing = False

    @classmethod
    async def open(cls, base_url: str, headers: dict[str, str] | None = None) -> HttpChannel:
        """`POST /session` (with the caller's headers: a token there binds the session at
        once), then open the stream."""
        ch = cls(base_url, headers)
        status, _, body = await ch.request("POST", "/session", b"", ch.extra, session=False)
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
        async with self._lock:
            for attempt in (0, 1):  # a kept-alive connection the host closed: once more
                if self._conn is None:
                    self._conn = await asyncio.open_connection(self.host, self.port,
                                                               limit=_LINE_LIMIT)
                    self._h11 = h11.Connection(h11.CLIENT)
                reader, writer = self._conn
                conn = self._h11
                try:
                    writer.write(_request(conn, method, path, h, body))
                    await writer.drain()
                    status, rh = await _response(reader, conn)
                    data = await _whole_body(reader, conn)
                except (ConnectionError, h11.RemoteProtocolError):
                    writer.close()
                    self._conn = None
                    if attempt:
                        raise
                    continue
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                else:  # the host closes it (Connection: close)
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
                conn = h11.Connection(h11.CLIENT)
                writer.write(_request(conn, "GET", "/stream", headers))
                status, rh = await _response(reader, conn)
                if status != 200:
                    body = await _whole_body(reader, conn)
                    writer.close()
                    raise HttpStatusError(status, body)
                self.streams += 1
                self._opened.set()
                await self._events(_body(reader, conn))
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

    async def _events(self, chunks: AsyncIterator[bytes]) -> None:
        buf = b""
        data: list[str] = []
        async for chunk in chunks:
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
            if len(buf) > _LINE_LIMIT:
                raise ConnectionError(f"an event line over {_LINE_LIMIT} bytes")

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
        with contextlib.suppress(ConnectionError, OSError, h11.ProtocolError):
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
