"""The stdio transport (`a2e-host stdio`): one session over a pair of pipes, one JSON message
a line each way (NDJSON), what the A2E SDK's `SubprocessTransport` spawns. The same request
core as every other transport (`host.net.pipeline`); logs go to stderr only.

A line longer than `limits.max_frame_bytes` is answered `invalid_message` and skipped (there is
no frame to close); a line that is not JSON gets `parse_error`, as a WebSocket frame would, and
so does a line that is not valid UTF-8 (a WebSocket closes such a frame with 1007 and HTTP
answers 400; a pipe has no frame to close, so the line is refused and the session goes on).
End of input means the client is done: a last line without its newline is still a line, the
requests read are answered, then the session ends (`finished()` returns) and the command
commits and exits 0. Stdin may be a pipe or a regular file (`a2e-host stdio < requests.ndjson`):
either is read only while the request core takes messages, and the lines of a read are taken
up only while it does (the rest wait, raw), so the host holds a block of the input, never the
whole of it, and never a `parse_error` for every line of a block, when its replies back up.
"""

from __future__ import annotations

import asyncio
import os
import stat
from typing import TYPE_CHECKING, Any

from host.core.context import ConnectionContext
from host.net.http import Headers, HttpRequest
from host.net.serving import Served
from protocol.codec import error_reply
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from host.net.serving import Server

__all__ = ["StdioConnection", "serve_pipes"]


class _Writer(asyncio.Protocol):
    def __init__(self, conn: StdioConnection) -> None:
        self.conn = conn

    def pause_writing(self) -> None:
        self.conn.pipeline.pause_writing()

    def resume_writing(self) -> None:
        self.conn.pipeline.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.lost()


class StdioConnection(asyncio.Protocol, Served):
    """One session over a read pipe (its protocol) and a write pipe."""

    kind = "stdio"

    def __init__(self, server: Server) -> None:
        self.server = server
        self.upgrade = HttpRequest("stdio", Headers(()), None)
        self.limits = server.config.limits
        self.ctx = ConnectionContext(conn_id=server.next_conn_id("s"), remote="stdio")
        self.pipeline = server.new_pipeline(self.ctx, self)
        self.reader: Any = None
        self.writer: Any = None
        self._buf = bytearray()
        self._skipping = False  # inside a line over the limit
        self._eof = asyncio.Event()
        self._done = asyncio.Event()
        self.reading_task: asyncio.Task[None] | None = None  # a regular file's reader
        self.may_read = asyncio.Event()  # clear while the pipeline holds back (a file's reader waits)
        self.may_read.set()

    # -- the read pipe --------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.reader = transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self._lines()

    def _lines(self, ending: bool = False) -> None:
        """Take up the whole lines buffered, while the pipeline takes messages (`ending`: all
        of them, the input is over). Held back, the rest waits here, raw: at most what one
        read brought, however many `parse_error`s its lines would cost."""
        buf = self._buf
        most = self.limits.max_frame_bytes
        while ending or self.may_read.is_set():
            end = buf.find(b"\n")
            if end < 0:
                if len(buf) > most and not self._skipping:
                    self._too_long()
                if self._skipping:
                    buf.clear()
                return
            line = bytes(buf[:end]).rstrip(b"\r")
            del buf[:end + 1]
            if self._skipping:
                self._skipping = False
                continue
            if len(line) > most:
                self._too_long()
                self._skipping = False
                continue
            self._line(line)

    def _line(self, line: bytes) -> None:
        """One whole line: a message, or `parse_error` when it is not UTF-8 (nothing else)."""
        if not line.strip():
            return
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            self.pipeline.push(error_reply(
                ErrorCode.PARSE_ERROR, f"line is not valid UTF-8 (byte {err.start}); skipped"))
            return
        self.pipeline.receive(text)

    def _too_long(self) -> None:
        self._skipping = True
        self.pipeline.push(error_reply(
            ErrorCode.INVALID_MESSAGE,
            f"line over the limit of {self.limits.max_frame_bytes} bytes; skipped"))

    def eof_received(self) -> bool | None:
        self._lines(ending=True)  # the whole lines held back, then the last one
        buf = self._buf
        if buf and not self._skipping:  # a last line without its newline
            line = bytes(buf).rstrip(b"\r")
            buf.clear()
            self._line(line)
        buf.clear()
        self._skipping = False
        self._eof.set()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof.set()

    # -- the pipeline's sink --------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Write one line."""
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(data + b"\n")

    def set_reading(self, reading: bool) -> None:
        """Read the pipe (or the file) on, or hold off (backpressure)."""
        if reading:
            if not self.may_read.is_set():
                self.may_read.set()
                if self._buf:  # lines held back: in a callback of their own, not in the pipeline's
                    asyncio.get_running_loop().call_soon(self._lines)
        else:
            self.may_read.clear()
        if self.reader is None or self.reader.is_closing():
            return
        if reading:
            self.reader.resume_reading()
        else:
            self.reader.pause_reading()

    # -- the end --------------------------------------------------------------------------------

    def lost(self) -> None:
        """The write pipe closed (the client is gone)."""
        self._eof.set()
        self._end()

    def _end(self) -> None:
        if self._done.is_set():
            return
        self._done.set()
        if self.reading_task is not None:
            self.reading_task.cancel()
        self.pipeline.close()
        self.server.closed(self)

    async def finished(self, stop: asyncio.Event | None = None) -> None:
        """Return once the input ended (or `stop` was set) and what was read is answered
        (within `server.drain_timeout` after `stop`)."""
        waits = [asyncio.ensure_future(self._eof.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        stopping = stop is not None and stop.is_set()
        drain = self.server.config.server.drain_timeout
        await self.pipeline.drain(drain if stopping else drain + self.limits.request_timeout)
        await self.close(1000, "end of input")

    async def close(self, code: int = 1000, reason: str = "", wait: float = 1.0) -> None:
        """End the session; the output is flushed (within `wait` s) and closed."""
        self._end()
        writer = self.writer
        if writer is not None and not writer.is_closing():
            writer.close()
        if self.reader is not None:
            self.reader.close()

    def abort(self) -> None:
        """End now."""
        self._end()
        if self.writer is not None:
            self.writer.abort()


class _FileWriter:
    """A regular file as the output (no asyncio pipe can write one): written at once."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._closed = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    abort = close


def _is_file(f: Any) -> bool:
    return stat.S_ISREG(os.fstat(f.fileno()).st_mode)


async def _read_file(conn: StdioConnection, f: Any) -> None:
    """A regular file as the input: read in a worker thread, a block at a time, and only while
    the pipeline takes messages (what it holds is one block, not the file)."""
    loop = asyncio.get_running_loop()
    while True:
        await conn.may_read.wait()
        data = await loop.run_in_executor(None, f.read, 1 << 16)
        if not data:
            conn.eof_received()
            return
        conn.data_received(data)


async def serve_pipes(server: Server, read: Any, write: Any) -> StdioConnection:
    """Serve one session over the file objects `read` and `write` (stdin and stdout for the
    command: pipes, or regular files); `await conn.finished()` until it ends."""
    loop = asyncio.get_running_loop()
    conn = StdioConnection(server)
    if _is_file(write):
        conn.writer = _FileWriter(write.fileno())
    else:
        conn.writer, _ = await loop.connect_write_pipe(lambda: _Writer(conn), write)
    if _is_file(read):
        conn.reading_task = loop.create_task(_read_file(conn, read))
    else:
        await loop.connect_read_pipe(lambda: conn, read)
    server.opened(conn)
    return conn
