"""Memory sessions: one `memory/init` each, held by the connection that opened it (its
`ConnectionContext.capabilities["memory"]`, a `Sessions`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from host.core.context import ConnectionContext
from host.memory.working import ByteBudget, WorkingTier
from host.store.records import Scope
from protocol.errors import ErrorCode, ProtocolError

__all__ = ["CAPABILITY", "DEFAULT_AGENT", "Session", "Sessions", "session_of", "sessions_of",
           "working_entries"]

CAPABILITY = "memory"  # the key of a connection's `Sessions` in `ConnectionContext.capabilities`

DEFAULT_AGENT = "default"  # a session's agent when the client names none


@dataclass(slots=True)
class Session:
    """One `memory/init`: a namespace, an agent, and the session's own working tier."""

    memory_id: str
    scope: Scope
    working: WorkingTier
    vector_ticket: int = 0  # the embedding worker's ticket of this session's newest write


@dataclass(slots=True)
class Sessions:
    """The memory sessions of one connection; `budget` bounds the working-tier bytes of all."""

    budget: ByteBudget
    by_id: dict[str, Session] = field(default_factory=dict)

    def close(self) -> None:
        """Drop every session (and so its working tier)."""
        self.by_id.clear()


def sessions_of(ctx: ConnectionContext) -> Sessions | None:
    """The memory sessions of connection `ctx`, None before its first `memory/init`."""
    return cast("Sessions | None", ctx.capabilities.get(CAPABILITY))


def session_of(ctx: ConnectionContext, memory_id: str, req_id: str) -> Session:
    """The session `memory_id` of connection `ctx`, else `memory_not_found`."""
    sessions = sessions_of(ctx)
    s = sessions.by_id.get(memory_id) if sessions is not None else None
    if s is None:
        raise ProtocolError(
            ErrorCode.MEMORY_NOT_FOUND,
            "unknown memory_id on this connection (call memory/init first)",
            req_id=req_id,
            field="memory_id",
        )
    return s


def working_entries(ctx: ConnectionContext) -> int:
    """How many working-tier entries the sessions of connection `ctx` hold."""
    sessions = sessions_of(ctx)
    return 0 if sessions is None else sum(len(s.working) for s in sessions.by_id.values())
