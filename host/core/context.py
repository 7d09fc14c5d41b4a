"""The per-connection context: who the peer is, what its token allows, its memory sessions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from host.memory.session import Session
from host.memory.working import ByteBudget
from protocol.errors import ErrorCode, ProtocolError

if TYPE_CHECKING:
    from host.core.auth import Grant

__all__ = ["ConnectionContext"]


@dataclass(slots=True)
class ConnectionContext:
    """What the host knows about one connection. Sessions die with it.

    `identity` is the authenticated agent (None when authentication is off) and `grant` what
    its token allows (None until a valid token; see `host.core.auth`); `agent_id` the
    handshake's claim. `working_budget` bounds the working-tier bytes of all its sessions. `last_write` is the newest pending write of this connection: a read
    waits for it first, so a connection always reads its own writes.
    """

    conn_id: str
    remote: str = ""
    agent_id: str = ""
    identity: str | None = None
    grant: Grant | None = None
    working_budget: ByteBudget | None = None
    sessions: dict[str, Session] = field(default_factory=dict)
    last_write: asyncio.Future | None = None

    def session(self, memory_id: str, req_id: str) -> Session:
        """The session `memory_id` of this connection, else `memory_not_found`."""
        s = self.sessions.get(memory_id)
        if s is None:
            raise ProtocolError(
                ErrorCode.MEMORY_NOT_FOUND,
                "unknown memory_id on this connection (call memory/init first)",
                req_id=req_id,
                field="memory_id",
            )
        return s

    async def writes_done(self) -> None:
        """Wait until this connection's pending writes have committed (errors ignored)."""
        w = self.last_write
        if w is not None and not w.done():
            await asyncio.wait((w,))

    def close(self) -> None:
        """Drop every session (and so its working tier)."""
        self.sessions.clear()
