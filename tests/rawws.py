"""A WebSocket client on a bare socket, for frames no library client would send: several
frames in one write, fragments, a continuation with no message, a message too big in parts."""

from __future__ import annotations

import base64
import os
import socket
import struct

__all__ = ["RawWebSocket", "frame"]

TEXT, BINARY, CONTINUATION, CLOSE = 0x1, 0x2, 0x0, 0x8


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """One masked client frame."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += struct.pack("!BH", 0x80 | 126, n)
    else:
        head += struct.pack("!BQ", 0x80 | 127, n)
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + body


class RawWebSocket:
    """A blocking client: `send_raw` bytes as they are, `recv` one frame (opcode, payload)."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
             f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
             "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head

    def _more(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed by the host")
        self.buf += data

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_raw(self, data: bytes) -> None:
        """Write `data` in one call (frames built with `frame`)."""
        self.sock.sendall(data)

    def recv(self) -> tuple[int, bytes]:
        """The next frame from the host: (opcode, payload); the host's frames are whole."""
        b0, b1 = self._take(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._take(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._take(8))
        return b0 & 0x0F, self._take(n)

    def close_code(self) -> int:
        """Read frames up to the host's close frame; its status code."""
        while True:
            opcode, payload = self.recv()
            if opcode == CLOSE:
                return int(struct.unpack("!H", payload[:2])[0])

    def close(self) -> None:
        """Drop the socket."""
        self.sock.close()
