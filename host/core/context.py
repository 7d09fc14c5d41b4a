"""The per-connection context: who the peer is, what its token allows, its pending writes, and
what each capability keeps per connection (the memory sessions: `host.memory.session`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from host.core.grant import Grant

__all__ = ["CapabilityState", "ConnectionContext", "Pieces"]


class CapabilityState(Protocol):
    """What a capability keeps for one connection (`ConnectionContext.capabilities`)."""

    def close(self) -> None:
        """The connection is gone: drop what it held."""


class Pieces:
    """An encoded message in pieces, for `ConnectionContext.push`: a piece several messages
    share (the entries of a change, sent to every watch that sees them) is held once, however
    many of them wait; the pieces are joined when the message is sent. `len()` is the whole
    message's, which is what the bounds on unsent bytes count."""

    __slots__ = ("parts", "size")

    def __init__(self, *parts: bytes) -> None:
        self.parts = parts
        self.size = sum(len(p) for p in parts)

    def __len__(self) -> int:
        return self.size

    def join(self) -> bytes:
        """The message as one bytes object."""
        return b"".join(self.parts)


def _soon(callback: Callable[[], object]) -> None:
    asyncio.get_running_loop().call_soon(callback)


@dataclass(slots=True)
class ConnectionContext:
    """What the host knows about one connection. Its capabilities' state dies with it.

    `identity` is the authenticated agent (None when authentication is off) and `grant` what
    its token allows (None until a valid token; see `host.core.auth`); `agent_id` the
    handshake's claim. `capabilities` holds each capability's state of this connection by
    capability name (the memory sessions under "memory"), closed with the connection.
    `last_write` is the newest pending write of this connection: a read waits for it first, so
    a connection always reads its own writes.

    `push(message, key=None, limit=0) -> bool` sends a server-initiated message (an event: a
    protocol struct, its encoding, or `Pieces` of it) after the replies owed (set by the
    transport's request core; None on a transport that carries no events).

    `after_reply(callback)`, called in a request's handler, runs `callback()` (in a later
    callback of the loop) once that request's reply is queued, so what `callback` pushes goes
    after the reply (a watch's first events). How a handler is run (stepped at once or in a
    task) is the request core's business, and only this hook needs to know it: the request
    core sets it; without one, `callback` runs soon.
    """

    conn_id: str
    remote: str = ""
    agent_id: str = ""
    identity: str | None = None
    grant: Grant | None = None
    capabilities: dict[str, CapabilityState] = field(default_factory=dict)
    last_write: asyncio.Future | None = None
    push: Callable[..., bool] | None = None
    after_reply: Callable[[Callable[[], object]], None] = _soon

    async def writes_done(self) -> None:
        """Wait until this connection's pending writes have committed (errors ignored)."""
        w = self.last_write
        if w is not None and not w.done():
            await asyncio.wait((w,))

    def close(self) -> None:
        """Close every capability's state (the memory sessions and so their working tiers)."""
        for state in self.capabilities.values():
            state.close()
        self.capabilities.clear()
