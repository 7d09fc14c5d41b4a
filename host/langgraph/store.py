"""`A2EStore` and `AsyncA2EStore`: LangGraph's `BaseStore` on an A2E memory host, over the wire.

Both run one `Session` (`host.langgraph.session`: a `host.client.MemoryClient` connection with
one memory session, opened again when the connection ended) and turn a batch of LangGraph ops
into wire requests (`host.langgraph.plans`), all built and checked before any is sent, then
sent in op order, pipelined on that connection: a batch costs one round trip whatever its size.

`A2EStore` is sync first (like `SqliteStore`): its connection lives on a private event-loop
thread; `abatch` waits on it without blocking the caller's loop. `AsyncA2EStore` is async
first (like `AsyncPostgresStore`): its connection lives on the loop that opened it, concurrent
calls there are gathered into one batch (`AsyncBatchedBaseStore`), and its sync methods work
from other threads but raise `asyncio.InvalidStateError` on that loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph.store.base import BaseStore, IndexConfig, Op, Result, TTLConfig
from langgraph.store.base.batch import AsyncBatchedBaseStore

from host.langgraph.plans import MAX_FRAME_BYTES, A2EStoreError, Tier
from host.langgraph.session import Session

__all__ = ["A2EStore", "A2EStoreError", "AsyncA2EStore"]

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 15.0  # seconds a sync store's close waits for the host to end the connection


def _ttl_interval(ttl: TTLConfig | None, minutes: float | None) -> float:
    return float(minutes or (ttl or {}).get("sweep_interval_minutes") or 5) * 60


class A2EStore(BaseStore):
    """LangGraph's `BaseStore` on an A2E host, sync first. Open it with `from_conn_string`."""

    supports_ttl = True

    def __init__(self, url: str, *, namespace: str = "langgraph", token: str | None = None,
                 index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 tier: Tier = "episodic", agent: str | None = None,
                 min_score: float | None = None,
                 max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        """Connect (on a private event-loop thread) to the host at `url` and open a session in
        the A2E `namespace` as the token's agent (or `agent`); items go to `tier`. A search
        with a query returns `limit` items, best first, unless `min_score` asks for only
        those scored at least that; no request is sent over `max_frame_bytes` (the host's
        `limits.max_frame_bytes`). docs/langgraph.md."""
        self.index_config = index
        self.ttl_config = ttl
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="a2e-store")
        self._thread.start()
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()
        try:
            self._session = self._call(Session.open(url, namespace, token, agent, tier,
                                                     index, ttl, min_score, max_frame_bytes))
        except BaseException:
            self._shutdown()
            raise
        self.embeddings = self._session.index.embeddings if self._session.index else None

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str, *, namespace: str = "langgraph",
                         token: str | None = None, index: IndexConfig | None = None,
                         ttl: TTLConfig | None = None, tier: Tier = "episodic",
                         agent: str | None = None, min_score: float | None = None,
                         max_frame_bytes: int = MAX_FRAME_BYTES) -> Iterator[A2EStore]:
        """`with A2EStore.from_conn_string("ws://127.0.0.1:8765") as store:` (closed after)."""
        store = cls(url, namespace=namespace, token=token, index=index, ttl=ttl, tier=tier,
                    agent=agent, min_score=min_score, max_frame_bytes=max_frame_bytes)
        try:
            yield store
        finally:
            store.close()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def setup(self) -> None:
        """Check that the host answers (the host keeps its own schema: nothing to create)."""
        self._call(self._session.ping())

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` in order as one pipelined exchange with the host (see the module)."""
        return self._call(self._session.run(list(ops)))  # type: ignore[no-any-return]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` without blocking the caller's event loop."""
        fut = asyncio.run_coroutine_threadsafe(self._session.run(list(ops)), self._loop)
        return await asyncio.wrap_future(fut)  # type: ignore[no-any-return]

    def sweep_ttl(self) -> int:
        """Delete the expired items of the store's A2E namespace and tier now; how many."""
        return self._call(self._session.sweep())  # type: ignore[no-any-return]

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None
                          ) -> concurrent.futures.Future[None]:
        """Sweep every `sweep_interval_minutes` (default: the TTL config's, else 5) on a
        thread until `stop_ttl_sweeper`; without a TTL config, nothing (a done future)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config:
            future.set_result(None)
            return future
        if self._sweeper is not None and self._sweeper.is_alive():
            future.add_done_callback(lambda f: self._stop.set() if f.cancelled() else None)
            return future
        self._stop.clear()
        interval = _ttl_interval(self.ttl_config, sweep_interval_minutes)

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sweep_ttl()
                except Exception:  # noqa: BLE001 - the next round tries again
                    logger.exception("TTL sweep failed")
            if not future.done():
                future.set_result(None)

        self._sweeper = threading.Thread(target=loop, daemon=True, name="a2e-ttl-sweeper")
        self._sweeper.start()
        future.add_done_callback(lambda f: self._stop.set() if f.cancelled() else None)
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True when it stopped (or was not running) within `timeout`."""
        if self._sweeper is None or not self._sweeper.is_alive():
            return True
        self._stop.set()
        self._sweeper.join(timeout)
        if self._sweeper.is_alive():
            return False
        self._sweeper = None
        return True

    def close(self) -> None:
        """Stop the sweeper, close the connection and the private loop. Idempotent. The
        connection's close waits at most `CLOSE_TIMEOUT` seconds for the host (one that does not
        answer is left behind, its socket closed with the loop)."""
        self.stop_ttl_sweeper()
        if self._loop.is_closed():
            return
        try:
            fut = asyncio.run_coroutine_threadsafe(self._session.close(), self._loop)
            try:
                fut.result(CLOSE_TIMEOUT)
            except concurrent.futures.TimeoutError:
                fut.cancel()
                logger.warning("the host did not answer the close within %s s", CLOSE_TIMEOUT)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class AsyncA2EStore(AsyncBatchedBaseStore):
    """LangGraph's `BaseStore` on an A2E host, async first. Open it with
    `async with AsyncA2EStore.from_conn_string(url) as store:`."""

    supports_ttl = True

    def __init__(self, session: Session, index: IndexConfig | None = None,
                 ttl: TTLConfig | None = None) -> None:
        super().__init__()
        self._session = session
        self.index_config = index
        self.ttl_config = ttl
        self.embeddings = session.index.embeddings if session.index else None
        self._sweeper: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, *, namespace: str = "langgraph",
                               token: str | None = None, index: IndexConfig | None = None,
                               ttl: TTLConfig | None = None, tier: Tier = "episodic",
                               agent: str | None = None, min_score: float | None = None,
                               max_frame_bytes: int = MAX_FRAME_BYTES,
                               ) -> AsyncIterator[AsyncA2EStore]:
        """Connect to the host at `url`, open a session in the A2E `namespace` as the
        token's agent (or `agent`), yield the store, and close it after (the parameters:
        `A2EStore`)."""
        session = await Session.open(url, namespace, token, agent, tier, index, ttl,
                                      min_score, max_frame_bytes)
        store = cls(session, index=index, ttl=ttl)
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper()
            await session.close()
            if store._task is not None:
                store._task.cancel()

    async def setup(self) -> None:
        """Check that the host answers (the host keeps its own schema: nothing to create)."""
        await self._session.ping()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` in order as one pipelined exchange with the host (see the module)."""
        return await self._session.run(list(ops))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """`abatch` from another thread; on the store's own loop, `asyncio.InvalidStateError`."""
        try:
            if asyncio.get_running_loop() is self._loop:
                raise asyncio.InvalidStateError(
                    "Synchronous calls to AsyncA2EStore detected in the main event loop. "
                    "Use the asynchronous interface: `await store.abatch(...)`.")
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop).result()

    async def sweep_ttl(self) -> int:
        """Delete the expired items of the store's A2E namespace and tier now; how many."""
        return await self._session.sweep()

    async def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None
                                ) -> asyncio.Task[None]:
        """Sweep every `sweep_interval_minutes` (default: the TTL config's, else 5) in a task
        until `stop_ttl_sweeper`; without a TTL config, a task that ends at once."""
        if not self.ttl_config:
            return asyncio.create_task(asyncio.sleep(0))
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        self._stop.clear()
        interval = _ttl_interval(self.ttl_config, sweep_interval_minutes)

        async def loop() -> None:
            while True:
                try:
                    async with asyncio.timeout(interval):
                        await self._stop.wait()
                    return
                except TimeoutError:
                    pass
                try:
                    await self.sweep_ttl()
                except Exception:  # noqa: BLE001 - the next round tries again
                    logger.exception("TTL sweep failed")

        self._sweeper = asyncio.create_task(loop())
        return self._sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; True when it stopped (or was not running) within `timeout`."""
        if self._sweeper is None or self._sweeper.done():
            return True
        self._stop.set()
        done, _ = await asyncio.wait([self._sweeper], timeout=timeout)
        if not done:
            return False
        self._sweeper = None
        return True

