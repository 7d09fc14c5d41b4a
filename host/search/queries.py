"""`QueryVectors`: the vectors of search queries, batched, cached and shared out fairly.

Every similarity query needs the vector of its text, and the embedder is the one slow step.
Queries are embedded on a thread of their own (a `Lane`, apart from the background worker that
embeds stored entries, so a query never waits behind a batch of entries), and:

- **batched**: the queries waiting when the thread gets free are embedded in one call (an int8
  ONNX model costs about 0.7 of the single-query time per query in a batch); a query is queued
  the moment it is asked (`request`), so a free thread starts on it while the query's keyword
  search runs on the event loop, and a busy one takes it into its next call;
- **cached**: the vectors of the last `query_cache` distinct texts are kept (an agent asking the
  same question again, or many agents asking the usual ones, costs no embedding);
- **bounded**: at most `max_query_chars` characters of a query are embedded (the whole query
  still goes to keyword search), so one query costs at most a few milliseconds;
- **fair**: waiting queries are queued per namespace and, within it, per connection, and a call
  takes them round-robin (one from the next namespace, one from its next connection, ...),
  within a budget of characters (`query_batch_chars`, padding counted: a batch costs its length
  times its longest text). So a tenant sending many long queries gets its share of the thread
  and no more: another connection's short query is in the next call at the latest.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from host.search.embed import Embedder
from host.search.lanes import Lane

__all__ = ["QueryVectors"]


@dataclass(slots=True)
class _Waiting:
    text: str
    futures: list[asyncio.Future[np.ndarray]] = field(default_factory=list)


class QueryVectors:
    """Query vectors of one embedder (see the module docstring)."""

    def __init__(
        self, embedder: Embedder, max_chars: int = 512, cache: int = 1024,
        batch_chars: int = 4096, batch_max: int = 32,
    ) -> None:
        self.embedder = embedder
        self.max_chars = max_chars
        self.batch_chars = batch_chars
        self.batch_max = batch_max
        self._cache_size = cache
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        # namespace -> connection -> its waiting texts, oldest first; both rings rotate
        self._queues: OrderedDict[str, OrderedDict[str, deque[_Waiting]]] = OrderedDict()
        self._by_text: dict[str, _Waiting] = {}  # a text waiting: later askers join it
        self._lane = Lane("a2e-embed-query")
        self._call: asyncio.Future[np.ndarray] | None = None  # the call in progress
        self._closed = False
        self.calls = 0  # embedder calls made (for tests and benchmarks)
        self.order: list[str] = []  # texts in the order they were embedded (when `record`)
        self.record = False
        self.on_call: Callable[[int, float], None] | None = None  # (texts, seconds)

    @property
    def waiting(self) -> int:
        """Queries waiting for the thread."""
        return len(self._by_text)

    @property
    def busy(self) -> bool:
        """True while queries wait or are being embedded."""
        return bool(self._by_text) or self._lane.busy

    def bound(self, text: str) -> str:
        """The part of `text` that is embedded."""
        return text[: self.max_chars]

    async def vector(self, text: str, namespace: str = "", conn: str = "") -> np.ndarray:
        """The unit vector of the query `text` (its first `max_chars` characters), asked by
        connection `conn` in `namespace` (the fair-share keys)."""
        return await self.request(text, namespace, conn)

    def request(self, text: str, namespace: str = "", conn: str = ""
                ) -> asyncio.Future[np.ndarray]:
        """`vector` as a future, queued now: when the thread is free it starts on this text at
        once, while the caller goes on (the query's keyword search runs meanwhile)."""
        text = self.bound(text)
        fut: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            fut.set_result(hit)
            return fut
        waiting = self._by_text.get(text)
        if waiting is None:
            waiting = self._by_text[text] = _Waiting(text)
            conns = self._queues.get(namespace)
            if conns is None:
                conns = self._queues[namespace] = OrderedDict()
            q = conns.get(conn)
            if q is None:
                q = conns[conn] = deque()
            q.append(waiting)
        waiting.futures.append(fut)
        self._next()
        return fut

    def _take(self) -> list[_Waiting]:
        """The next call's texts: round-robin over namespaces, then their connections, while
        the padded cost (texts x longest) stays within `batch_chars`."""
        batch: list[_Waiting] = []
        longest = 0
        while self._queues and len(batch) < self.batch_max:
            ns, conns = next(iter(self._queues.items()))
            conn, q = next(iter(conns.items()))
            w = q[0]
            cost = (len(batch) + 1) * max(longest, len(w.text))
            if batch and cost > self.batch_chars:
                break
            q.popleft()
            batch.append(w)
            longest = max(longest, len(w.text))
            # the connection goes to the back of its namespace's ring, the namespace to the back
            # of the ring of namespaces; empty queues leave the rings
            conns.move_to_end(conn)
            if not q:
                del conns[conn]
            self._queues.move_to_end(ns)
            if not conns:
                del self._queues[ns]
        return batch

    def _next(self) -> None:
        """Hand the next call's texts to the thread, unless a call is in progress (its end
        hands the next)."""
        if self._call is not None or not self._queues or self._closed:
            return
        batch = self._take()
        loop = asyncio.get_running_loop()
        call = self._call = self._lane.run(self.embedder.embed_queries, [w.text for w in batch])
        call.add_done_callback(functools.partial(self._called, batch, loop.time()))

    def _called(self, batch: list[_Waiting], t0: float, call: asyncio.Future[np.ndarray]
                ) -> None:
        """A call returned: its askers get their vectors (or its error), the next call starts."""
        self._call = None
        if self._closed:
            return
        exc = None if call.cancelled() else call.exception()
        if exc is not None or call.cancelled():  # every asker of this batch gets it
            for w in batch:
                self._by_text.pop(w.text, None)
                for f in w.futures:
                    if f.done():
                        continue
                    if exc is None:
                        f.cancel()
                    else:
                        f.set_exception(exc)
            self._next()
            return
        vecs = call.result()
        self.calls += 1
        if self.on_call is not None:
            self.on_call(len(batch), asyncio.get_running_loop().time() - t0)
        if self.record:
            self.order.extend(w.text for w in batch)
        for j, w in enumerate(batch):
            self._by_text.pop(w.text, None)
            v = vecs[j]
            self._remember(w.text, v)
            for f in w.futures:
                if not f.done():
                    f.set_result(v)
        self._next()

    def _remember(self, text: str, v: np.ndarray) -> None:
        if self._cache_size <= 0:
            return
        self._cache[text] = v
        self._cache.move_to_end(text)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def embed_now(self, fn: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
        """`fn(texts)` on the query thread, in turn with the queries (calibration texts)."""
        return await self._lane.run(fn, texts)

    async def close(self) -> None:
        """Stop taking queries; a call in progress is abandoned (its askers get cancelled)."""
        self._closed = True
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        for w in self._by_text.values():  # waiting or in the abandoned call
            for f in w.futures:
                f.cancel()
        self._queues.clear()
        self._by_text.clear()
        self._lane.close()
        await self._lane.settle(3.0)
