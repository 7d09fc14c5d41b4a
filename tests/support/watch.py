"""Change streams over a real connection, for the watch tests of every module: a store entry
in wire form, a client with a session open, the client's next change event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from host.client import MemoryClient
from protocol.messages import MemoryChangedEvent

__all__ = ["changed", "entry", "session"]


def entry(key: Any, content: Any = "x", tier: str = "semantic", **kw: Any) -> dict[str, Any]:
    return {"key": key, "content": content, "tier": tier, **kw}


async def session(connect: Callable[..., Any], agent: str = "a1", ns: str = "ns") -> MemoryClient:
    """A client with a session in `ns` as `agent`."""
    c: MemoryClient = await connect()
    await c.init(ns, {"agent": agent})
    return c


async def changed(c: MemoryClient) -> MemoryChangedEvent:
    """The client's next event, which must be a change."""
    ev = await c.next_event()
    assert isinstance(ev, MemoryChangedEvent), ev
    return ev
