"""The `picows` transport (`server.transport = "picows"`): picows' Cython framing of the
connections the front (`host.net.front`) upgraded; `host.net.pipeline` does the rest.

Of the same shape as the `websockets` adapter: picows calls back with each frame (no task a
connection); a whole text message goes to `Pipeline.receive`, whose replies come back through
`send`. The replies to the frames of one socket read (a pipelining client) go out in one write.
At the hand-off the front gives the socket to picows' own protocol (`transport.set_protocol`)
with the bytes it read, so picows parses the upgrade request itself and from then on reads the
socket with no Python step a read.

As on `websockets`: a frame over `limits.max_frame_bytes` closes the connection with 1009
(picows does it), a text message that is not UTF-8 with 1007; a binary message is answered
`parse_error`; pings are answered, and an idle peer is pinged every 20 s and dropped 20 s later
without a pong. A connection the host fails (those closes, picows' own or ours, while the client
may still be sending) ends with a lingering close (`host.net.linger`), so the client reads the
close frame instead of a reset: picows' parser reads nothing after the close frame, and its
`disconnect()` then leaves the end to the linger (picows holds the socket's transport through
`_Held`).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from host.extras import missing
from host.lifecycle import waited

try:  # the `picows` extra: without it, an error naming the setting and the extra
    from picows import (
        WSAutoPingStrategy,
        WSCloseCode,
        WSFrame,
        WSListener,
        WSMsgType,
        WSTransport,
        WSUpgradeRequest,
    )
    from picows.picows import WSProtocol  # type: ignore[attr-defined]
except ImportError as exc:
    raise missing("picows", "picows", 'server.transport = "picows"') from exc

from host.core.context import ConnectionContext
from host.net.http import HttpRequest
from host.net.linger import Linger
from host.net.serving import Served

if TYPE_CHECKING:
    from host.net.serving import Server

__all__ = ["PicowsConnection", "attach"]

# picows logs every connection and disconnection at INFO: keep its own lines to warnings
_wire_log = logging.getLogger("a2e_host.picows.wire")
_wire_log.setLevel(logging.WARNING)
# given an adapter (not a Logger), picows makes no child logger a connection
_wire = logging.LoggerAdapter(_wire_log, {})
_READ_BUFFER = 4096  # bytes a connection starts with; picows doubles it when a frame needs it

_TEXT = WSMsgType.TEXT
_BINARY = WSMsgType.BINARY
_CONTINUATION = WSMsgType.CONTINUATION
_CLOSE = WSMsgType.CLOSE
_PING_SECONDS = 20.0
CLOSE_WAIT = 2.0  # seconds to wait for the peer's answer to our close frame
_CLEAN = frozenset({WSCloseCode.OK, WSCloseCode.GOING_AWAY})  # the closes that are no failure
_SHORT = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")


class PicowsConnection(WSListener, Served):  # type: ignore[misc]
    """Serves one WebSocket from picows' frame callbacks."""

    kind = "websocket"

    def __init__(self, server: Server, upgrade: HttpRequest) -> None:
        super().__init__()
        self.server = server
        self.limits = server.config.limits
        self.upgrade = upgrade
        self.ctx = ConnectionContext(conn_id=server.next_conn_id(), remote=upgrade.remote_text)
        self.pipeline = server.new_pipeline(self.ctx, self)
        self._transport: WSTransport | None = None
        self._send: Any = None
        self._raw: Any = None  # the socket's asyncio transport
        self._out: list[bytes] | None = None  # frames of one socket read's replies
        self._fragments: bytearray | None = None
        self._fragment_text = True
        self._closed = False
        self._failed = False  # `_fail` closed the connection

    # -- picows callbacks ------------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        self._transport = transport
        self._send = transport.send
        self._raw = transport.underlying_transport
        self.server.opened(self)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._closed = True
        self.pipeline.close()
        self.server.closed(self)

    def pause_writing(self) -> None:
        self.pipeline.pause_writing()

    def resume_writing(self) -> None:
        self.pipeline.resume_writing()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if self._failed:  # the frames after the one that failed the connection in this read
            return
        last = frame.last_in_buffer
        if not last and self._out is None:
            # more frames came in this read: gather their replies into one socket write
            self._out = []
            asyncio.get_running_loop().call_soon(self._write_out)  # in case no last frame
        self._frame(transport, frame)
        if last and self._out is not None:
            self._write_out()

    def _write_out(self) -> None:
        out, self._out = self._out, None
        transport = self._transport
        if out and not self._closed and transport is not None and \
                not transport.is_close_frame_sent:  # nothing after a close frame
            self._raw.write(b"".join(out))

    def _write(self, data: bytes) -> None:
        out = self._out
        if out is None:
            self._send(_TEXT, data)
            return
        n = len(data)  # a server's frame: FIN + text, no mask
        if n < 126:
            out.append(bytes((0x81, n)))
        elif n < 65536:
            out.append(_SHORT.pack(0x81, 126, n))
        else:
            out.append(_LONG.pack(0x81, 127, n))
        out.append(data)

    def _frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is _TEXT and frame.fin and self._fragments is None:
            try:
                text = frame.get_payload_as_utf8_text()
            except UnicodeDecodeError:
                self._fail(WSCloseCode.INVALID_TEXT, "invalid UTF-8 in a text frame")
                return
            self._message(text)
        elif kind is _TEXT or kind is _BINARY:
            if self._fragments is not None:
                self._fail(WSCloseCode.PROTOCOL_ERROR, "a new message inside a fragmented one")
                return
            if frame.fin:  # a whole binary message: refused whatever it holds, so not copied
                self._message(b"")
                return
            self._fragments = bytearray(frame.get_payload_as_memoryview())
            self._fragment_text = kind is _TEXT
        elif kind is _CONTINUATION:
            self._continuation(frame)
        elif kind is _CLOSE:
            self._write_out()
            if not transport.is_close_frame_sent:
                transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()
        # PING is answered by picows; PONG needs nothing

    def _continuation(self, frame: WSFrame) -> None:
        parts = self._fragments
        if parts is None:
            self._fail(WSCloseCode.PROTOCOL_ERROR, "a continuation frame without a message")
            return
        parts += frame.get_payload_as_memoryview()
        if len(parts) > self.limits.max_frame_bytes:
            self._fail(WSCloseCode.MESSAGE_TOO_BIG, "message too big")
            return
        if not frame.fin:
            return
        self._fragments = None
        if not self._fragment_text:
            self._message(b"")  # binary: refused whatever it holds
            return
        try:
            text = parts.decode("utf-8")
        except UnicodeDecodeError:
            self._fail(WSCloseCode.INVALID_TEXT, "invalid UTF-8 in a text message")
            return
        self._message(text)

    def _fail(self, code: WSCloseCode, reason: str) -> None:
        transport = self._transport
        if transport is None:
            return
        self._write_out()
        self._fragments = None
        self._failed = True
        if not transport.is_close_frame_sent:
            transport.send_close(code, reason.encode())
        # the frames after it are not read: the socket lingers (`_Protocol.buffer_updated`)

    def _message(self, data: str | bytes) -> None:
        self.pipeline.receive(data)

    # -- the pipeline's sink ---------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Send one reply (a text frame)."""
        if not self._closed and self._send is not None:
            self._write(data)

    def set_reading(self, reading: bool) -> None:
        """Read the socket on, or hold off (backpressure)."""
        raw = self._raw
        if raw is None or self._closed or raw.is_closing():
            return
        if reading:
            raw.resume_reading()
        else:
            raw.pause_reading()

    # -- the server's side ------------------------------------------------------------------

    async def close(self, code: int, reason: str, wait: float = CLOSE_WAIT) -> None:
        """Send a close frame, wait up to `wait` s for the peer's, then drop the socket."""
        transport = self._transport
        if transport is None or self._closed:
            return
        self._write_out()
        if not transport.is_close_frame_sent:
            transport.send_close(WSCloseCode(code), reason.encode())
        if not await waited(transport.wait_disconnected(), wait):
            self.abort()

    def abort(self) -> None:
        """Drop the socket now, whatever is unsent."""
        if self._raw is not None and not self._closed:
            self._raw.abort()


class _Held:
    """The socket's transport as picows holds it: the same methods (bound to it, so a write
    costs no more), except `close()`, which leaves the end to a lingering close once one has
    begun, and `pause_reading()`, which does not stop one."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.linger: Linger | None = None
        for name in ("write", "writelines", "abort", "get_extra_info", "get_write_buffer_size",
                     "get_write_buffer_limits", "set_write_buffer_limits", "is_closing",
                     "resume_reading", "is_reading", "can_write_eof", "write_eof",
                     "get_protocol", "set_protocol"):
            setattr(self, name, getattr(transport, name))

    def close(self) -> None:
        if self.linger is None:
            self.transport.close()

    def pause_reading(self) -> None:
        if self.linger is None:
            self.transport.pause_reading()


class _Protocol(WSProtocol):  # type: ignore[misc]
    """picows' server protocol for one connection the front hands over."""

    def __init__(self, server: Server, upgrade: HttpRequest,
                 release: Callable[[], None]) -> None:
        # picows has no public way to serve a socket already accepted (the front's): its
        # server protocol is built as `ws_create_server` builds it, by name so that a reordered
        # signature fails loudly instead of passing a limit as a timeout
        super().__init__(
            host_port=None, ws_path=None, is_client_side=False,
            ws_listener_factory=self._listener, logger=_wire, disconnect_on_exception=True,
            websocket_handshake_timeout=10.0, enable_auto_ping=True,
            auto_ping_idle_timeout=_PING_SECONDS, auto_ping_reply_timeout=_PING_SECONDS,
            auto_ping_strategy=WSAutoPingStrategy.PING_WHEN_IDLE, enable_auto_pong=True,
            max_frame_size=server.config.limits.max_frame_bytes, extra_headers=None,
            read_buffer_init_size=_READ_BUFFER,
        )
        self.server = server
        self.up = upgrade
        self._release = release
        self.held: _Held | None = None

    def connection_made(self, transport: Any) -> None:
        self.held = _Held(transport)
        super().connection_made(self.held)

    def buffer_updated(self, nbytes: int) -> None:
        WSProtocol.buffer_updated(self, nbytes)
        if self.transport.is_close_frame_sent:
            self._closing()

    def _closing(self) -> None:
        """A close frame is sent: if it fails the connection (picows' parser or our `_fail`)
        and the client's close has not come, the socket lingers (nothing more is parsed)."""
        held = self.held
        shake = self.transport.close_handshake
        if held is None or held.linger is not None or shake.recv is not None or \
                shake.sent.code in _CLEAN or held.transport.is_closing():
            return
        held.linger = Linger(held.transport, self.connection_lost)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._release()
        self.up.close()

    def _listener(self, request: WSUpgradeRequest) -> Any:
        return PicowsConnection(self.server, self.up)


def attach(server: Server, transport: Any, request: HttpRequest, data: bytes,
           release: Callable[[], None]) -> None:
    """The front's hand-off of an upgrade request (`data`: the bytes read so far)."""
    proto = _Protocol(server, request, release)
    transport.set_protocol(proto)
    proto.connection_made(transport)
    view = memoryview(data)
    while view:
        if proto.held is not None and proto.held.linger is not None:
            break  # the connection failed: the rest is not read
        buf = proto.get_buffer(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        view = view[n:]
        proto.buffer_updated(n)
