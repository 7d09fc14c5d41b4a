"""A lingering close: the end of a WebSocket the host failed (a frame over the limit: 1009, not
UTF-8: 1007, broken framing: 1002) while the client may still be sending.

Closing a socket whose received bytes are unread makes the kernel send a TCP reset, and a reset
makes the client's kernel discard what it had received and not yet read: the close frame, so
the client never learns why. So after its close frame the host reads no more frames: the socket
gets a `Linger` as its protocol, which half-closes it (the close frame, then FIN: the client
reads both), discards what the client still sends, and ends the connection when the client
closes its side, or at the latest after `LINGER_SECONDS` or `LINGER_BYTES` (then with a reset:
a client that keeps sending cannot hold the connection, or cost more than that many bytes
read).

    Linger(transport, lost)   # from now on `transport`'s bytes are discarded; `lost(exc)` is
                              # called with the connection's end (its protocol's connection_lost)

On TLS, where a socket cannot be half-closed, the linger reads and discards the same way until
the client closes or a bound is reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["LINGER_BYTES", "LINGER_SECONDS", "Linger"]

LINGER_SECONDS = 3.0  # at most this long after the close frame
LINGER_BYTES = 64 * 1024 * 1024  # at most this many bytes discarded


class Linger(asyncio.Protocol):
    """The protocol of a failed connection's socket from its close frame on (see the module
    docstring)."""

    def __init__(self, transport: Any, lost: Callable[[Exception | None], None],
                 seconds: float = LINGER_SECONDS, max_bytes: int = LINGER_BYTES) -> None:
        self.transport = transport
        self._lost = lost
        self.left = max_bytes
        transport.set_protocol(self)
        if transport.can_write_eof():
            transport.write_eof()  # after what is buffered: the close frame
        transport.resume_reading()
        self._timer = asyncio.get_running_loop().call_later(seconds, self.end)

    def data_received(self, data: bytes) -> None:
        self.left -= len(data)
        if self.left < 0:
            self.end()

    def eof_received(self) -> bool:
        return False  # the client is done: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        self._lost(exc)

    def end(self) -> None:
        """A bound is reached: drop the socket now."""
        self.transport.abort()
