"""The router: message type -> handler. Capabilities register their handlers like plugins.

A handler is `async def handler(msg, ctx) -> Reply`, where a `Reply` is a reply message or a
future of one (a write whose reply comes after its commit; the connection keeps reply order).
It raises `ProtocolError` for a request it refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from host.core.context import ConnectionContext
from protocol.errors import ErrorCode, ProtocolError

__all__ = ["Router", "Handler", "Reply", "is_pending", "then"]

Reply = Any  # a protocol message, or an asyncio.Future resolving to one
Handler = Callable[[Any, ConnectionContext], Coroutine[Any, Any, Reply]]


class Router:
    """Maps message classes to handlers; `capabilities` lists what the host offers."""

    def __init__(self) -> None:
        self._handlers: dict[type, Handler] = {}
        self.capabilities: set[str] = set()

    def register(self, msg_type: type, handler: Handler, capability: str | None = None) -> None:
        """Route messages of `msg_type` to `handler`. Raises `ValueError` if already routed."""
        if msg_type in self._handlers:
            raise ValueError(f"{msg_type.__name__} already has a handler")
        self._handlers[msg_type] = handler
        if capability:
            self.capabilities.add(capability)

    def dispatch(self, msg: Any, ctx: ConnectionContext) -> Coroutine[Any, Any, Reply]:
        """The handler's coroutine for `msg` (await it for the reply); raises
        `invalid_message` at once for a type nobody handles. Not a coroutine itself: one
        coroutine a request fewer on the hot path."""
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise ProtocolError(
                ErrorCode.INVALID_MESSAGE,
                f"{type(msg).__name__} is not a request this host serves",
                req_id=getattr(msg, "id", ""),
                field="type",
            )
        return handler(msg, ctx)


def then(fut: asyncio.Future[Any], fn: Callable[[Any], Any]) -> asyncio.Future[Any]:
    """A future of `fn(fut's result)`, chained by a callback (no task a request).

    A write's handler returns this future of its reply instead of awaiting the commit, so the
    connection takes up its next request meanwhile and keeps reply order (a `Reply` may be a
    future); the alternative, a task a write, costs more on the hot path. It knows nothing of
    how the request core runs a handler. `fut`'s exception or cancellation passes through; an
    exception `fn` raises becomes the new future's exception.
    """
    out: asyncio.Future[Any] = fut.get_loop().create_future()

    def done(f: asyncio.Future[Any]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        try:
            out.set_result(fn(f.result()))
        except Exception as err:  # noqa: BLE001 - handed to whoever awaits the reply
            out.set_exception(err)

    fut.add_done_callback(done)
    return out


def is_pending(reply: Reply) -> bool:
    """True for a reply that is still a future."""
    return isinstance(reply, asyncio.Future)
