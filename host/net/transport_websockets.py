"""The `websockets` transport (the default): websockets' sans-I/O `ServerProtocol` frames the
bytes of a connection the front (`host.net.front`) upgraded; `host.net.pipeline` does the rest.

One asyncio protocol a connection, of the same shape as the picows adapter: bytes in ->
`ServerProtocol.receive_data` -> frames -> whole messages -> `Pipeline.receive`; replies ->
`send_text` -> the socket, the replies of one socket read in one write. Asyncio's flow control
(`pause_writing`) and the pipeline's backpressure (`set_reading`) meet here.

As the library's own server did: a frame over `limits.max_frame_bytes` closes the connection
with 1009, a text message that is not UTF-8 with 1007, broken framing with 1002; pings are
answered; an idle peer is pinged every 20 s and dropped 20 s later without a pong;
permessage-deflate is negotiated when `server.compression` is on. A connection the host fails
(those closes, while the client may still be sending) ends with a lingering close
(`host.net.linger`), so the client reads the close frame instead of a reset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from host.core.context import ConnectionContext
from host.lifecycle import waited
from host.net.http import HttpRequest
from host.net.linger import Linger
from host.net.serving import Served

if TYPE_CHECKING:
    from host.net.serving import Server

__all__ = ["WebsocketsConnection", "attach"]

_wire = logging.getLogger("a2e_host.websockets.wire")
_wire.setLevel(logging.WARNING)  # the library logs every open and close at INFO
_perf = time.perf_counter

PING_SECONDS = 20.0  # an idle peer is pinged after this, and dropped this long without a pong
CLOSE_WAIT = 2.0  # seconds to wait for the peer's answer to our close frame
_TEXT, _BINARY, _CONT, _CLOSE, _PONG = Opcode.TEXT, Opcode.BINARY, Opcode.CONT, Opcode.CLOSE, Opcode.PONG


class WebsocketsConnection(asyncio.Protocol, Served):
    """Serves one WebSocket from the socket's callbacks."""

    kind = "websocket"

    def __init__(self, server: Server, upgrade: HttpRequest,
                 release: Callable[[], None]) -> None:
        self.server = server
        self.upgrade = upgrade
        self._release = release
        limits = server.config.limits
        self.proto = ServerProtocol(
            max_size=limits.max_frame_bytes, logger=_wire,
            extensions=[ServerPerMessageDeflateFactory()] if server.config.server.compression
            else None)
        self.ctx = ConnectionContext(conn_id=server.next_conn_id(), remote=upgrade.remote_text)
        self.pipeline = server.new_pipeline(self.ctx, self)
        self.transport: Any = None
        self._parts: bytearray | None = None  # a fragmented message so far
        self._text = True
        self._batch = False  # inside data_received: replies go out in one write at its end
        self._open = False
        self._eof = False  # the client closed its side
        self._linger: Linger | None = None
        self._lost = asyncio.Event()
        self._seen = _perf()
        self._pinged = 0.0

    # -- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.set()
        self.pipeline.close()
        if self._open:
            self.server.closed(self)
        self._release()
        self.upgrade.close()

    def pause_writing(self) -> None:
        self.pipeline.pause_writing()

    def resume_writing(self) -> None:
        self.pipeline.resume_writing()

    def data_received(self, data: bytes) -> None:
        self._seen = _perf()
        proto = self.proto
        proto.receive_data(data)
        self._batch = True
        try:
            for event in proto.events_received():
                if type(event) is Frame:
                    self._frame(event)
                elif isinstance(event, Request):
                    self._handshake(event)
        finally:
            self._batch = False
            self._write()

    def eof_received(self) -> bool | None:
        self._eof = True
        self.proto.receive_eof()
        self._write()
        return None

    # -- frames ---------------------------------------------------------------------------------

    def _handshake(self, request: Request) -> None:
        response = self.proto.accept(request)
        self.proto.send_response(response)
        if response.status_code == 101:
            self._open = True
            self.server.opened(self)

    def _frame(self, frame: Frame) -> None:
        op = frame.opcode
        if op is _TEXT or op is _BINARY:
            if frame.fin:
                self._message(frame.data, op is _TEXT)
            else:
                self._parts = bytearray(frame.data)
                self._text = op is _TEXT
        elif op is _CONT:
            parts = self._parts
            if parts is None:  # the protocol refused it already; nothing to assemble
                return
            parts += frame.data
            if frame.fin:
                self._parts = None
                self._message(parts, self._text)
        elif op is _PONG:
            self._pinged = 0.0
        elif op is _CLOSE:
            self._parts = None
        # PING is answered by the protocol itself

    def _message(self, data: bytes | bytearray | memoryview, text: bool) -> None:
        if not text:
            self.pipeline.receive(b"")  # binary: refused whatever it holds, so not copied
            return
        try:
            message = bytes(data).decode("utf-8") if type(data) is memoryview else data.decode()
        except UnicodeDecodeError:
            self.proto.fail(CloseCode.INVALID_DATA, "invalid UTF-8 in a text message")
            return
        self.pipeline.receive(message)

    def _write(self) -> None:
        out = self.proto.data_to_send()
        if not out or self.transport is None:
            return
        eof = out[-1] == b""
        data = b"".join(out)
        if data:
            self.transport.write(data)
        if eof:
            if self._eof or self.proto.close_rcvd is not None:
                self.transport.close()  # the client sends nothing more
            else:  # the host failed the connection: the client may still be sending
                self._linger = Linger(self.transport, self.connection_lost)

    # -- the pipeline's sink --------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Send one reply (a text frame)."""
        if self.proto.state is not State.OPEN:
            return  # closing: the peer will not read it
        self.proto.send_text(data)
        if not self._batch:
            self._write()

    def set_reading(self, reading: bool) -> None:
        """Read the socket on, or hold off (backpressure)."""
        if self.transport is None or self.transport.is_closing() or self._linger is not None:
            return
        if reading:
            self.transport.resume_reading()
        else:
            self.transport.pause_reading()

    # -- the server's side ----------------------------------------------------------------------

    def expire(self, now: float, timeout: float) -> None:
        """The request deadline, and the keepalive ping of an idle peer."""
        self.pipeline.expire(now, timeout)
        if self.proto.state is not State.OPEN:
            return
        if self._pinged:
            if now - self._pinged > PING_SECONDS:
                self.transport.abort()  # no pong: the peer is gone
        elif now - self._seen > PING_SECONDS:
            self._pinged = now
            self.proto.send_ping(b"")
            self._write()

    async def close(self, code: int, reason: str, wait: float = CLOSE_WAIT) -> None:
        """Send a close frame, wait up to `wait` s for the peer's, then drop the socket."""
        if self._lost.is_set() or self.transport is None:
            return
        if self.proto.state is State.OPEN:
            self.proto.send_close(code, reason)
            self._write()
        if not await waited(self._lost.wait(), wait):
            self.abort()

    def abort(self) -> None:
        """Drop the socket now, whatever is unsent."""
        if self.transport is not None and not self._lost.is_set():
            self.transport.abort()


def attach(server: Server, transport: Any, request: HttpRequest, data: bytes,
           release: Callable[[], None]) -> None:
    """The front's hand-off of an upgrade request (`data`: the bytes read so far)."""
    conn = WebsocketsConnection(server, request, release)
    transport.set_protocol(conn)
    conn.connection_made(transport)
    transport.resume_reading()
    conn.data_received(data)
