"""Memory sessions: one `memory/init` each, owned by a connection (`host.core.context`)."""

from __future__ import annotations

from dataclasses import dataclass

from host.memory.working import WorkingTier
from host.store.base import Scope

__all__ = ["DEFAULT_AGENT", "Session"]

DEFAULT_AGENT = "default"  # a session's agent when the client names none


@dataclass(slots=True)
class Session:
    """One `memory/init`: a namespace, an agent, and the session's own working tier."""

    memory_id: str
    scope: Scope
    working: WorkingTier
