"""One WebSocket connection: read frames, decode, dispatch, write replies in request order.

Replies that are ready go out at once when nothing is queued before them; replies that wait
for a commit (futures) go through a per-connection sender task that keeps the order. Errors
become `error` replies; only the frame-size and UTF-8 violations close the connection (the
`websockets` library does that with 1009 and 1007).

Limits kept here, read from `limits` at each frame (so a reload applies to open connections):
a frame beyond `requests_per_second` (a `TokenBucket`) is answered `rate_limited`; a request
still waiting `request_timeout` seconds after its arrival is answered `internal_error`
(retryable, `detail.reason` "deadline") when the server's `DeadlineWatch` calls `expire()`
(no timer per request: that would cost ~10 us a request) — a write it started may still commit, and stores and
forgets are idempotent, so a retry is safe.

Backpressure: while `max_pipelined` replies or `max_unsent_bytes` of encoded replies are owed
to the client, no further frame is read from it, so a client that sends without reading its
replies fills its own TCP buffers instead of the host's memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from host.config import LimitsConfig
from host.core.context import ConnectionContext
from host.core.router import Router
from host.net.http import Upgrade
from host.net.limits import RequestRate
from protocol.codec import decode_request, encode, error_reply
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import Error, Request

__all__ = ["TYPE_OF", "Connection", "RequestHook", "binary_refused", "error_for", "past_deadline",
           "rate_limited"]

log = logging.getLogger("a2e_host.connection")

# Called once per answered request: (conn_id, req_id, message type, "ok" or the error code,
# seconds from reading the frame to sending the reply). Must be cheap: it is on the hot path.
RequestHook = Callable[[str, str, str, str, float], None]

TYPE_OF: dict[type, str] = {cls: cls.__struct_config__.tag for cls in Request.__args__}  # type: ignore[attr-defined]
_perf = time.perf_counter


def error_for(exc: BaseException, req_id: str) -> Any:
    """The `error` reply for an exception a request raised (internal ones are logged)."""
    if isinstance(exc, ProtocolError):
        detail = {"field": exc.field} if exc.field else {}
        return error_reply(exc.code, exc.message, exc.req_id or req_id, detail)
    if isinstance(exc, RecursionError):  # hostile nesting that got past the frame decoder
        log.warning("request %s: value nested too deeply", req_id)
        return error_reply(ErrorCode.INVALID_MESSAGE, "JSON nested too deeply", req_id)
    log.error("internal error on request %s", req_id, exc_info=exc)
    return error_reply(ErrorCode.INTERNAL_ERROR, "internal error; the request may be retried", req_id)


def rate_limited(req_id: str) -> ProtocolError:
    """The error of a request past the connection's `limits.requests_per_second`."""
    return ProtocolError(ErrorCode.RATE_LIMITED,
                         "too many requests on this connection; retry later", req_id=req_id)


def binary_refused() -> Any:
    """The `parse_error` reply to a binary message (the protocol is JSON text)."""
    return error_reply(ErrorCode.PARSE_ERROR, "binary frames are not accepted; send JSON text")


def past_deadline(req_id: str, timeout: float | None) -> Any:
    """The `error` reply for a request answered at its deadline (retryable)."""
    log.warning("request %s exceeded the deadline of %s s", req_id, timeout)
    return error_reply(ErrorCode.INTERNAL_ERROR,
                       f"request deadline of {timeout} s exceeded; it may still take effect;"
                       " retry", req_id, {"reason": "deadline"})


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # an abandoned write's error is not "never retrieved"


class Connection:
    """Serves one WebSocket until it closes. `run()` is the connection handler's body."""

    def __init__(
        self, ws: ServerConnection, router: Router, conn_id: str, upgrade: Upgrade, *,
        limits: LimitsConfig | None = None, on_request: RequestHook | None = None,
    ) -> None:
        self.ws = ws
        self.upgrade = upgrade
        self.router = router
        self.on_request = on_request
        self.limits = limits
        self._rate = RequestRate(limits)
        # deadline bookkeeping: when the request being dispatched / awaited arrived (0: none)
        self._run_task: asyncio.Task[Any] | None = None
        self._dispatch_since = 0.0
        self._wait_since = 0.0
        self._expired = {"dispatch": False, "wait": False}
        self.ctx = ConnectionContext(
            conn_id=conn_id, remote=upgrade.remote_text if upgrade.remote else ""
        )
        self._queue: asyncio.Queue[tuple[str, Any, str, float, bytes | None]] = asyncio.Queue()
        self._queued = 0
        self._unsent = 0  # bytes of the encoded replies in the queue
        self._progress = asyncio.Event()  # set each time the sender is done with a reply
        self._busy = False
        self._sender: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._pushed: dict[object, int] = {}  # events queued unsent, by push key
        self._events = 0
        self._closed = False
        self.ctx.push = self.push

    async def run(self) -> None:
        """Read and answer frames until the peer closes or the host drains this connection."""
        self._run_task = asyncio.current_task()
        try:
            async for frame in self.ws:  # while draining too: a frame sent before the close
                self._busy = True           # is in flight from the client's side; answer it
                self._idle.clear()
                try:
                    await self._answer(frame)
                finally:
                    self._busy = False
                    self._maybe_idle()
        except ConnectionClosed:
            pass
        finally:
            self._closed = True
            if self._sender is not None:  # the socket is closed: nothing more can be sent
                self._sender.cancel()
            self.ctx.close()

    @property
    def in_flight(self) -> int:
        """Requests read and not yet answered on this connection."""
        return self._queued + self._busy

    @property
    def owes(self) -> bool:
        """True while a request read from the client is not answered yet."""
        return self.in_flight > 0

    def _done(self, req_id: str, msg_type: str, reply: Any, started: float) -> None:
        if self.on_request is not None:
            code = reply.code if type(reply) is Error else "ok"
            self.on_request(self.ctx.conn_id, req_id, msg_type, code, _perf() - started)

    async def _answer(self, frame: str | bytes) -> None:
        started = _perf()
        req_id = ""
        msg_type = "invalid"
        allowed = self._rate.allow()
        if isinstance(frame, bytes):
            reply: Any = binary_refused()
        else:
            try:
                msg = decode_request(frame)
                req_id, msg_type = msg.id, TYPE_OF.get(type(msg), "invalid")
                if not allowed:
                    raise rate_limited(req_id)
                self._dispatch_since = started
                try:
                    reply = await self.router.dispatch(msg, self.ctx)
                finally:
                    self._dispatch_since = 0.0
            except asyncio.CancelledError:
                if not self._expiry_taken("dispatch"):
                    raise
                reply = past_deadline(req_id, self._timeout())
            except Exception as exc:
                reply = error_for(exc, req_id)
        data = None if isinstance(reply, asyncio.Future) else encode(reply)
        if data is not None and self._queued == 0 and self._events == 0:
            await self.ws.send(data, text=True)
            self._done(req_id, msg_type, reply, started)
            return
        self._queued += 1
        self._unsent += len(data) if data is not None else 0
        self._queue.put_nowait((req_id, reply, msg_type, started, data))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_loop())
        await self._backpressure()

    async def _backpressure(self) -> None:
        """Wait while this connection owes too much (`limits.max_pipelined` replies or
        `limits.max_unsent_bytes` encoded bytes): reading no further frame meanwhile lets TCP
        push back on a client that sends without reading. Returns when the sender has ended."""
        limits, sender = self.limits, self._sender
        if limits is None or sender is None:
            return
        while (self._queued >= limits.max_pipelined or self._unsent >= limits.max_unsent_bytes) \
                and not sender.done():
            self._progress.clear()
            await self._progress.wait()

    def push(self, message: Any, key: object = None, limit: int = 0) -> bool:
        """Queue a server-initiated message after the replies owed; False (nothing queued)
        when closed or `limit` messages of `key` wait unsent."""
        if self._closed:
            return False
        if key is not None and limit > 0 and self._pushed.get(key, 0) >= limit:
            return False
        data = message if isinstance(message, bytes) else encode(message)
        self._events += 1
        self._pushed[key] = self._pushed.get(key, 0) + 1
        self._queue.put_nowait(("", key, "", 0.0, data))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_loop())
        return True

    async def _send_loop(self) -> None:
        while True:
            req_id, item, msg_type, started, data = await self._queue.get()
            if not msg_type:  # a pushed event
                try:
                    await self.ws.send(data, text=True)  # type: ignore[arg-type]
                except ConnectionClosed:
                    return
                finally:
                    self._events -= 1
                    left = self._pushed.get(item, 1) - 1
                    if left:
                        self._pushed[item] = left
                    else:
                        self._pushed.pop(item, None)
                continue
            try:
                if isinstance(item, asyncio.Future):
                    fut = item
                    self._wait_since = started
                    try:  # shielded: a deadline must not cancel the write itself
                        item = fut.result() if fut.done() else await asyncio.shield(fut)
                    except asyncio.CancelledError:
                        if not self._expiry_taken("wait"):
                            raise
                        fut.add_done_callback(_consume)
                        item = past_deadline(req_id, self._timeout())
                    except Exception as exc:
                        item = error_for(exc, req_id)
                    finally:
                        self._wait_since = 0.0
                await self.ws.send(data if data is not None else encode(item), text=True)
                self._done(req_id, msg_type, item, started)
            except ConnectionClosed:
                return
            finally:
                self._queued -= 1
                self._unsent -= len(data) if data is not None else 0
                self._progress.set()
                self._maybe_idle()

    def _timeout(self) -> float | None:
        return self.limits.request_timeout if self.limits is not None else None

    def _expiry_taken(self, which: str) -> bool:
        """True when a CancelledError is `expire()`'s (and no other cancel is pending)."""
        if not self._expired[which]:
            return False
        self._expired[which] = False
        task = asyncio.current_task()
        return task is None or task.uncancel() == 0

    def expire(self, now: float, timeout: float) -> None:
        """Cancel the waits of requests that arrived more than `timeout` s before `now`
        (`time.perf_counter` seconds); each is then answered with the deadline error."""
        if self._dispatch_since and now - self._dispatch_since > timeout and self._run_task:
            self._dispatch_since = 0.0
            self._expired["dispatch"] = True
            self._run_task.cancel()
        if self._wait_since and now - self._wait_since > timeout and self._sender:
            self._wait_since = 0.0
            self._expired["wait"] = True
            self._sender.cancel()

    def _maybe_idle(self) -> None:
        if not self._busy and self._queued == 0:
            self._idle.set()

    async def close(self, code: int, reason: str) -> None:
        """Close the WebSocket (the close handshake, then the socket)."""
        await self.ws.close(code, reason)

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` s until every request read is answered (the connection idle).

        Frames that arrive meanwhile are still answered: the client sent them before it could
        know of the shutdown. The caller then closes the connection (1001), which stops the rest.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._idle.wait(), remaining)
            except TimeoutError:
                return
            # a frame may have started right after idle was set; wait once more
            if not self._busy and self._queued == 0:
                return
