"""The sans-I/O request core: one client's messages in, its replies out, in order.

Every transport (WebSocket over `websockets` or `picows`, HTTP + SSE, stdio) is a thin adapter
over one `Pipeline` a connection (or HTTP session): the adapter frames bytes into messages and
messages into bytes; the pipeline does everything between, and knows nothing of sockets.

    pipe = Pipeline(router, ctx, limits, sink)
    pipe.receive(text)        # one whole message from the client (bytes: a binary message)
    # ... the pipeline calls sink.send(data) with each encoded reply, in request order, and
    # sink.set_reading(False / True) when the adapter should stop / go on reading the client
    pipe.pause_writing()      # the adapter's send buffer is full (asyncio flow control) ...
    pipe.resume_writing()     # ... and has room again: owed replies go out
    pipe.push(message)        # a server-initiated message (an event), see below
    pipe.expire(now, timeout) # answer requests past their deadline (the server's sweep)
    await pipe.drain(timeout) # until every request read is answered (shutdown)
    pipe.close()              # the client is gone: drop what is owed, close the context

What it owns:
- **rate**: past `limits.requests_per_second` (a token bucket per pipeline) a request is
  answered `rate_limited`.
- **decode and dispatch**: `protocol.codec.decode_request`, then the router's handler. A
  handler runs alone: messages that arrive while one waits (a query's embedding, a read behind
  the connection's pending write) wait their turn, so requests run in order. With `step=True`
  (the store reads on the loop: SQLite) a handler is stepped at once in the adapter's callback
  and a reply that needs no waiting is encoded and sent before `receive` returns; a handler
  that waits goes on in a task. With `step=False` (PostgreSQL: asyncpg needs a task) every
  handler runs in a task. (Python 3.12's eager tasks do the same inside a task; until the
  project's floor is 3.12 the trick stays here.) A handler that needs something to happen
  after its reply is queued (a watch's first events) says `ctx.after_reply(callback)`, and
  need not know which way it was run; only the server (`HostServer.new_pipeline`) reads the
  store's `reads_on_loop` to choose `step`.
- **reply order**: a reply may be a future (a write, answered after its commit); replies are
  sent in request order as they resolve.
- **backpressure**: no further message is taken up while `limits.max_pipelined` replies, or
  `limits.max_unsent_bytes` of encoded replies, or `limits.max_request_bytes_in_flight` of
  requests (read and not answered) are owed, or the adapter's writing is paused; the adapter is
  told to stop reading meanwhile, so a client that sends without reading fills its own TCP
  buffers instead of the host's memory.
- **fair turns**: one pipeline takes up messages for at most `TURN_BUDGET` seconds a turn of
  the event loop; the rest wait for the next turn (`loop.call_soon`), after the other clients'
  reads, so one connection's pipelined heavy reads interleave with everyone else's.
- **shutdown**: the A2E SDK's `shutdown` message gets no reply; what the client sent after it
  is dropped, and once every reply owed is sent the pipeline calls the sink's `end()` (the
  adapter closes a WebSocket with 1000, ends an HTTP session, ends stdio's input).
- **deadlines**: `expire(now, timeout)` answers a request older than `limits.request_timeout`
  with `internal_error`, retryable, `detail.reason` "deadline" (a write it started may still
  commit; stores and forgets are idempotent, so a retry is safe).

Server-initiated messages (the watch capability's `memory/changed/event`):

    ok = ctx.push(message, key=watch_id, limit=n)   # in a handler or a commit callback

`ctx.push` is this pipeline's `push`, set on the connection's `ConnectionContext`. The message
(a protocol struct, bytes already encoded, or `Pieces` of them: a piece several events share is
held once while they wait) is sent after every reply owed when it is pushed,
so an event never overtakes the reply of a request that came before it. `key` (any hashable:
a watch id) and `limit` bound the events queued unsent under that key: `push` returns False,
and queues nothing, when `limit` of them are already waiting (the client does not read); the
caller decides what an overflow means (e.g. end the watch with a notice). A keyed message is
refused the same way when queueing it would take the bytes waiting (replies and pushed
messages) past `limits.max_unsent_bytes`: what a client that does not read makes the host hold
is bounded in bytes, not only in count. An unkeyed push (a notice that ends a watch) always
queues: one frame past the bound. `push` returns False too once the pipeline is closed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import types
from collections import deque
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from host.config import LimitsConfig
from host.core.context import ConnectionContext, Pieces
from host.core.router import Router
from host.lifecycle import waited
from host.net.limits import RequestRate
from host.net.replies import binary_refused, error_for, past_deadline, rate_limited
from protocol.codec import decode_request, encode
from protocol.messages import Error, Request, Shutdown

__all__ = ["TURN_BUDGET", "TYPE_OF", "Pipeline", "RequestHook", "Sink"]

log = logging.getLogger("a2e_host.pipeline")

# Called once per answered request: (conn_id, req_id, message type, "ok" or the error code,
# seconds from reading the message to sending the reply). Must be cheap: it is on the hot path.
RequestHook = Callable[[str, str, str, str, float], None]

TYPE_OF: dict[type, str] = {cls: cls.__struct_config__.tag for cls in Request.__args__}  # type: ignore[attr-defined]
TURN_BUDGET = 0.005  # seconds of handlers one pipeline may run in one turn of the event loop
_perf = time.perf_counter
_EVENT = ""  # the message type of a pushed message in the reply queue (not a request)


class Phase(enum.Enum):
    """Where a pipeline is in its life: it only moves forward."""

    OPEN = 1  # taking up messages
    ENDING = 2  # `shutdown` read: what came after is dropped; end after the replies owed
    END_DUE = 3  # ... every reply is sent and the sink's `end()` is scheduled
    CLOSED = 4  # the client is gone: nothing more is sent


_OPEN, _ENDING, _END_DUE, _CLOSED = Phase.OPEN, Phase.ENDING, Phase.END_DUE, Phase.CLOSED


@dataclass(slots=True)
class _Owed:
    """One reply owed to the client, in request order (or a pushed event among them)."""

    req_id: str
    reply: Any  # the reply message, or a future of it (a write, answered after its commit)
    type: str  # the request's message type; `_EVENT` for a pushed message
    started: float  # `perf_counter` when the request was taken up (0.0 for an event)
    data: bytes | Pieces | None  # the encoded reply; None while `reply` is a future
    size: int  # bytes of the request (0 for an event)
    key: Hashable = None  # an event's push key


class Sink(Protocol):
    """What a pipeline needs of its transport adapter."""

    def send(self, data: bytes) -> None:
        """Send one encoded message to the client (the adapter frames it)."""

    def set_reading(self, reading: bool) -> None:
        """Go on reading the client's messages (True) or hold off (False)."""

    def end(self) -> None:
        """The client sent `shutdown` and every reply owed is sent: end the connection or
        session gracefully (a WebSocket closes with 1000)."""


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # an abandoned write's error is not "never retrieved"


@types.coroutine
def _resume(coro: Any, waiting: Any) -> Generator[Any, Any, Any]:
    """Go on with `coro`, already stepped once and now waiting on `waiting`, as a task would."""
    while True:
        try:
            sent = yield waiting
        except BaseException as exc:  # a cancel (the deadline), thrown into the handler
            try:
                waiting = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration as stop:
                return stop.value


class Pipeline:
    """One client's request core (see the module docstring)."""

    def __init__(
        self, router: Router, ctx: ConnectionContext, limits: LimitsConfig, sink: Sink, *,
        on_request: RequestHook | None = None, step: bool = False,
    ) -> None:
        self.router = router
        self.ctx = ctx
        self.limits = limits
        self.sink = sink
        self.on_request = on_request
        self._step = step
        self._rate = RequestRate(limits)
        ctx.push = self.push
        ctx.after_reply = self._after_reply
        self._after: list[Callable[[], object]] = []  # the handler's `ctx.after_reply` callbacks
        self._replies: deque[_Owed] = deque()  # owed, in request order
        self._unsent = 0  # bytes encoded and not yet sent (behind a pending reply, or paused)
        self._frames: deque[str | bytes] = deque()  # received, not yet taken up
        self._queued_bytes = 0  # bytes of `_frames`
        self._taken_bytes = 0  # bytes of requests taken up and not yet answered
        self._pushed: dict[Hashable, int] = {}  # events queued unsent, by push key
        self._task: asyncio.Task[Any] | None = None  # the handler that waits
        self._task_bytes = 0
        self._dispatch_since = 0.0
        self._expired = False  # the waiting handler was cancelled at its deadline
        self._writing_paused = False
        self._reading = True
        self._phase = _OPEN
        self._turn_start = 0.0
        self._later: asyncio.Handle | None = None  # the next turn's `_pump`
        self._idle: asyncio.Event | None = None
        self._flush_cb = self._flush_done

    # -- what the adapter calls ---------------------------------------------------------------

    def receive(self, data: str | bytes) -> None:
        """One whole message from the client: text (JSON) or bytes (a binary message)."""
        if self._phase is not _OPEN:
            return
        if self._task is None and not self._frames and self._later is None and \
                not self._over(len(data)):
            if self._turn_left():
                self._answer(data)
                if self._replies:
                    self._pressure()
                if self._idle is not None:
                    self._maybe_idle()
                return
            self._later = asyncio.get_running_loop().call_soon(self._next_turn)
        self._enqueue(data)

    def _enqueue(self, data: str | bytes) -> None:
        """Keep a message for `_pump` to take up in turn (a handler, a limit or the turn's
        budget holds it back)."""
        self._frames.append(data)
        self._queued_bytes += len(data)
        self._pressure()

    def pause_writing(self) -> None:
        """The adapter cannot send for now: owed replies wait here (and count)."""
        self._writing_paused = True
        self._pressure()

    def resume_writing(self) -> None:
        """The adapter can send again: send what is ready, take up waiting messages."""
        self._writing_paused = False
        self._flush()

    def push(self, message: Any, key: Hashable = None, limit: int = 0) -> bool:
        """Queue a server-initiated message after every reply owed now (see the module
        docstring); False (nothing queued) when closed or `limit` messages of `key` wait."""
        if self._phase is _CLOSED:
            return False
        if key is not None and limit > 0 and self._pushed.get(key, 0) >= limit:
            return False
        data = message if isinstance(message, (bytes, Pieces)) else encode(message)
        if not self._replies and not self._writing_paused:
            self.sink.send(data if isinstance(data, bytes) else data.join())
            return True
        if key is not None and self._unsent and \
                self._unsent + len(data) > self.limits.max_unsent_bytes:
            return False  # the client does not read: not one byte more for it
        self._replies.append(_Owed("", None, _EVENT, 0.0, data, 0, key))
        self._unsent += len(data)
        if key is not None:
            self._pushed[key] = self._pushed.get(key, 0) + 1
        self._pressure()
        return True

    def close(self) -> None:
        """The client is gone: nothing more is sent; the context's sessions are dropped."""
        if self._phase is _CLOSED:
            return
        self._phase = _CLOSED
        if self._task is not None:
            self._task.cancel()
        if self._later is not None:
            self._later.cancel()
            self._later = None
        for item in self._replies:
            if item.data is None:
                item.reply.add_done_callback(_consume)
        self._replies.clear()
        self._frames.clear()
        self._pushed.clear()
        self._after.clear()
        self._unsent = self._queued_bytes = self._taken_bytes = 0
        self.ctx.close()
        self._maybe_idle()

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._phase is _CLOSED

    @property
    def in_flight(self) -> int:
        """Requests taken up and not yet answered (messages received and not yet taken up
        are not counted)."""
        return len(self._replies) + (self._task is not None)

    @property
    def request_bytes(self) -> int:
        """Bytes of the requests received and not yet answered (taken up or waiting)."""
        return self._queued_bytes + self._taken_bytes

    @property
    def owes(self) -> bool:
        """True while a request received from the client is not answered yet."""
        return bool(self._replies or self._frames) or self._task is not None

    @property
    def reading(self) -> bool:
        """What the pipeline last told the adapter: read on (True) or hold off."""
        return self._reading

    def expire(self, now: float, timeout: float) -> None:
        """Answer the requests that arrived more than `timeout` s before `now`
        (`time.perf_counter` seconds) with the deadline error; a write they started may still
        commit."""
        if self._dispatch_since and now - self._dispatch_since > timeout and self._task:
            self._dispatch_since = 0.0
            self._expired = True
            self._task.cancel()
        late = False
        for item in self._replies:
            if item.type is _EVENT:
                continue
            if now - item.started <= timeout:
                break
            if item.data is None and not item.reply.done():
                item.reply.add_done_callback(_consume)
                item.reply = past_deadline(item.req_id, timeout)
                data = encode(item.reply)
                item.data = data
                self._unsent += len(data)
                late = True
        if late:
            self._flush()

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` s until every request received is answered (messages that
        arrive meanwhile are answered too: the client sent them before it knew)."""
        if self._phase is _CLOSED or not self.owes:
            return
        self._idle = asyncio.Event()
        await waited(self._idle.wait(), timeout)

    # -- requests ------------------------------------------------------------------------------

    def _turn_left(self) -> bool:
        """True while this turn of the loop has budget left for this pipeline."""
        now = _perf()
        if self._turn_start == 0.0:
            self._turn_start = now
            asyncio.get_running_loop().call_soon(self._end_turn)
            return True
        return now - self._turn_start < TURN_BUDGET

    def _end_turn(self) -> None:
        self._turn_start = 0.0

    def _next_turn(self) -> None:
        self._later = None
        self._pump()

    def _pump(self) -> None:
        """Take up the messages that waited (a handler, the limits, or the turn's budget)."""
        frames = self._frames
        while frames and self._task is None and self._phase is not _CLOSED and \
                self._later is None:
            if self._over(len(frames[0])):
                break
            if not self._turn_left():
                self._later = asyncio.get_running_loop().call_soon(self._next_turn)
                break
            data = frames.popleft()
            self._queued_bytes -= len(data)
            self._answer(data)
        self._pressure()
        self._maybe_idle()

    def _answer(self, data: str | bytes) -> None:
        started = _perf()
        size = len(data)
        self._taken_bytes += size
        req_id = ""
        msg_type = "invalid"
        allowed = self._rate.allow()
        reply: Any
        if type(data) is bytes:
            reply = binary_refused()
        else:
            try:
                msg = decode_request(data)
                req_id, msg_type = msg.id, TYPE_OF.get(type(msg), "invalid")
                if type(msg) is Shutdown:  # no reply: end once what came before is answered
                    self._taken_bytes -= size
                    self._shutdown()
                    return
                if not allowed:
                    raise rate_limited(req_id)
                coro = self.router.dispatch(msg, self.ctx)
                if not self._step:
                    self._wait(coro, None, req_id, msg_type, started, size)
                    return
                try:
                    waiting = coro.send(None)
                except StopIteration as done:
                    reply = done.value
                else:
                    self._wait(coro, waiting, req_id, msg_type, started, size)
                    return
            except Exception as exc:
                reply = error_for(exc, req_id)
        self._reply(req_id, msg_type, started, reply, size)

    def _wait(self, coro: Any, waiting: Any, req_id: str, msg_type: str, started: float,
              size: int) -> None:
        """Run the handler in a task (`waiting`: what it awaits after its first step, None
        when not stepped yet); later messages wait for it."""
        run = coro if waiting is None else _resume(coro, waiting)
        task = asyncio.get_running_loop().create_task(run)
        self._task = task
        self._dispatch_since = started
        task.add_done_callback(partial(self._handled, req_id, msg_type, started, size))

    def _handled(self, req_id: str, msg_type: str, started: float, size: int,
                 task: asyncio.Task[Any]) -> None:
        self._task = None
        self._dispatch_since = 0.0
        if self._phase is _CLOSED:
            return
        if task.cancelled():
            expired, self._expired = self._expired, False
            reply = past_deadline(req_id, self.limits.request_timeout) if expired else \
                error_for(RuntimeError("request cancelled"), req_id)
        else:
            exc = task.exception()
            reply = error_for(exc, req_id) if exc is not None else task.result()
        self._reply(req_id, msg_type, started, reply, size)
        self._pump()

    def _after_reply(self, callback: Callable[[], object]) -> None:
        """`ctx.after_reply`: `callback` runs once the reply of the request being handled
        is queued (`_reply`), whether its handler was stepped or ran in a task."""
        self._after.append(callback)

    def _reply(self, req_id: str, msg_type: str, started: float, reply: Any, size: int) -> None:
        if self._after:
            after, self._after = self._after, []
            call_soon = asyncio.get_running_loop().call_soon
            for callback in after:
                call_soon(callback)
        if isinstance(reply, asyncio.Future):
            self._replies.append(_Owed(req_id, reply, msg_type, started, None, size))
            reply.add_done_callback(self._flush_cb)
            return
        data = encode(reply)
        if not self._replies and not self._writing_paused:
            self._taken_bytes -= size
            if self._phase is not _CLOSED:
                self.sink.send(data)
            self._done(req_id, msg_type, reply, started)
            return
        self._replies.append(_Owed(req_id, reply, msg_type, started, data, size))
        self._unsent += len(data)

    def _flush_done(self, _: object) -> None:
        if self._phase is not _CLOSED:
            self._flush()

    def _flush(self) -> None:
        """Send the owed replies that are ready, in request order."""
        replies = self._replies
        while replies and not self._writing_paused and self._phase is not _CLOSED:
            item = replies[0]
            data = item.data
            if data is None:
                fut = item.reply
                if not fut.done():
                    break
                if fut.cancelled():
                    reply = error_for(RuntimeError("write cancelled"), item.req_id)
                else:
                    exc = fut.exception()
                    reply = error_for(exc, item.req_id) if exc is not None else fut.result()
                item.reply = reply
                data = encode(reply)
            else:
                self._unsent -= len(data)
            replies.popleft()
            self._taken_bytes -= item.size
            self.sink.send(data if isinstance(data, bytes) else data.join())  # `Pieces` of an event
            if item.type is _EVENT:
                key = item.key
                if key is not None:
                    left = self._pushed[key] - 1
                    if left:
                        self._pushed[key] = left
                    else:
                        del self._pushed[key]
            else:
                self._done(item.req_id, item.type, item.reply, item.started)
        self._pump()

    def _done(self, req_id: str, msg_type: str, reply: Any, started: float) -> None:
        if self.on_request is not None:
            code = reply.code if type(reply) is Error else "ok"
            self.on_request(self.ctx.conn_id, req_id, msg_type, code, _perf() - started)

    def _over(self, size: int = 0) -> bool:
        """Too much owed to the client: take up no further message (of `size` bytes)."""
        limits = self.limits
        if self._writing_paused or len(self._replies) >= limits.max_pipelined or \
                self._unsent >= limits.max_unsent_bytes:
            return True
        taken = self._taken_bytes
        return taken > 0 and taken + size > limits.max_request_bytes_in_flight

    def _pressure(self) -> None:
        """Tell the adapter to read only while nothing holds back the messages received."""
        if self._phase is _CLOSED:
            return
        reading = not (self._frames or self._over())
        if reading != self._reading:
            self._reading = reading
            self.sink.set_reading(reading)

    def _maybe_idle(self) -> None:
        if self._idle is not None and (self._phase is _CLOSED or not self.owes):
            self._idle.set()
        if self._phase is _ENDING and not self.owes:
            self._phase = _END_DUE
            asyncio.get_running_loop().call_soon(self._end_sink)

    def _shutdown(self) -> None:
        """`shutdown` taken up: what the client sent after it is dropped; the sink's `end()`
        follows the last reply owed."""
        log.info("connection %s: shutdown by the client", self.ctx.conn_id)
        self._phase = _ENDING
        self._frames.clear()
        self._queued_bytes = 0
        self._maybe_idle()

    def _end_sink(self) -> None:
        end = getattr(self.sink, "end", None)
        if end is not None and self._phase is not _CLOSED:
            end()
