"""`A2EStore` and `AsyncA2EStore`: LangGraph's `BaseStore` on an A2E memory host, over the wire.

Both run one `_Session` (a `host.client.MemoryClient` connection with one memory session) and
turn a batch of LangGraph ops into wire requests, in op order, pipelined on that connection:
runs of puts are one `memory/store` (and one `memory/forget` for the deletions), runs of gets
one `memory/retrieve` by keys, each search one retrieve with the store extensions (`filter`,
`key_prefix`, `offset`, `query` or `vector`, `refresh_ttl`), each namespace listing one
`memory/paths`. Replies on one connection come in request order and each read sees the writes
before it, so a batch costs one round trip whatever its size.

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
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    tokenize_path,
    validate_op_namespace,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore

from host.client import MemoryClient, RemoteError
from host.langgraph import mapping
from protocol.codec import new_id, now
from protocol.messages import (
    VERSION,
    MemoryForgetRequest,
    MemoryPathsRequest,
    MemoryRetrieveRequest,
    MemoryStoreRequest,
    MemorySweepRequest,
)

__all__ = ["A2EStore", "A2EStoreError", "AsyncA2EStore"]

logger = logging.getLogger(__name__)

Tier = Literal["episodic", "semantic"]
MAX_KEYS = 500  # keys of one retrieve or forget (the host's default allows 1000)
MAX_ENTRIES = 500  # entries of one store request (the host's default allows 1000)
MAX_REQUEST_BYTES = 768 * 1024  # rough encoded size of one store request (frames: 1 MiB)
CLOSE_TIMEOUT = 15.0  # seconds a sync store's close waits for the host to end the connection


class A2EStoreError(RuntimeError):
    """The host refused part of a batch (a quota, an entry over the size limit, ...)."""


@dataclass(frozen=True, slots=True)
class _Index:
    """LangGraph's `index` config, resolved: dims, the embeddings, the tokenized fields."""

    dims: int
    embeddings: Embeddings
    fields: list[tuple[str, str | list[str]]]

    @classmethod
    def of(cls, index: IndexConfig | None) -> _Index | None:
        if not index:
            return None
        named: Any = index.get("fields") or dict(index).get("text_fields") or ["$"]
        fields: list[str] = list(named)
        return cls(int(index["dims"]), ensure_embeddings(index.get("embed")),
                   [(f, tokenize_path(f) if f != "$" else "$") for f in fields])


class _Session:
    """One connection and memory session; every coroutine runs on the loop that opened it."""

    def __init__(self, client: MemoryClient, tier: Tier, index: _Index | None,
                 ttl: TTLConfig | None) -> None:
        self.client = client
        self.tier = tier
        self.index = index
        self.ttl = ttl
        self.space = mapping.space_of(index.dims) if index is not None else ""

    @classmethod
    async def open(cls, url: str, namespace: str, token: str | None, agent: str | None,
                   tier: Tier, index: IndexConfig | None, ttl: TTLConfig | None) -> _Session:
        """Connect to the host at `url` (ws://, wss://, http:// or https://) and open a session."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if url.startswith(("http://", "https://")):
            client = await MemoryClient.connect_http(url, headers or None)
        elif url.startswith(("ws://", "wss://")):
            client = await MemoryClient.connect(url, additional_headers=headers or None)
        else:
            raise ValueError(f"an A2E host address is ws://, wss://, http:// or https://: {url}")
        try:
            await client.init(namespace, {"agent": agent} if agent else {})
        except BaseException:
            await client.close()
            raise
        return cls(client, tier, _Index.of(index), ttl)

    async def close(self) -> None:
        await self.client.close()

    def _mid(self) -> str:
        assert self.client.memory_id is not None
        return self.client.memory_id

    # -- one batch --------------------------------------------------------------------

    async def run(self, ops: Sequence[Op]) -> list[Result]:
        """The results of `ops`, in order: every request sent before any reply is awaited."""
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = [None] * len(ops)
        waits: list[tuple[Awaitable[Any], Any]] = []
        i = 0
        while i < len(ops):
            op = ops[i]
            j = i + 1
            if isinstance(op, (PutOp, GetOp)):  # a run of the same kind goes together
                while j < len(ops) and type(ops[j]) is type(op):
                    j += 1
            run = list(range(i, j))
            if isinstance(op, PutOp):
                waits += await self._puts([ops[k] for k in run])  # type: ignore[misc]
            elif isinstance(op, GetOp):
                waits += await self._gets([(k, ops[k]) for k in run], results)  # type: ignore[misc]
            elif isinstance(op, SearchOp):
                waits.append(await self._search(i, op, results))
            elif isinstance(op, ListNamespacesOp):
                waits.append(await self._paths(i, op, results))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
            i = j
        errors: list[BaseException] = []
        for fut, done in waits:  # every reply, in order, even after an error
            try:
                done(await fut)
            except RemoteError as err:
                errors.append(_user_error(err))
            except A2EStoreError as err:
                errors.append(err)
        if errors:
            raise errors[0]
        return results

    def _refresh(self, asked: bool) -> bool:
        """Whether a read refreshes TTLs: asked for, and the TTL config's `refresh_on_read`
        is set (as LangGraph's SQLite store decides)."""
        return bool(asked and self.ttl and self.ttl.get("refresh_on_read", False))

    async def _send(self, msg: Any) -> Awaitable[Any]:
        return await self.client.submit(msg)

    async def _puts(self, ops: list[PutOp]) -> list[tuple[Awaitable[Any], Any]]:
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:  # LangGraph's rule: the last put of a key wins
            last[(tuple(op.namespace), op.key)] = op
        kept = list(last.values())
        vectors = await self._embed(kept)
        entries: list[dict[str, Any]] = []
        deletes: list[dict[str, Any]] = []
        for op, vecs in zip(kept, vectors):
            key = mapping.entry_key(op.namespace, op.key)
            if op.value is None:
                deletes.append(key)
                continue
            e: dict[str, Any] = {"key": key, "content": dict(op.value), "tier": self.tier,
                                 "ttl": mapping.ttl_seconds(op.ttl)}
            if vecs:
                e["vectors"], e["vector_space"] = vecs, self.space
            entries.append(e)
        waits: list[tuple[Awaitable[Any], Any]] = []
        for chunk in _chunks(entries):
            waits.append((await self._send(MemoryStoreRequest(
                id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(),
                entries=chunk)), _check_stored))  # type: ignore[arg-type]
        for k in range(0, len(deletes), MAX_KEYS):
            waits.append((await self._send(MemoryForgetRequest(
                id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(),
                keys=deletes[k:k + MAX_KEYS], tier=self.tier)), _ignore))
        return waits

    async def _embed(self, ops: list[PutOp]) -> list[list[list[float]]]:
        """Each put's vectors (one a text its index embeds), in one call of the embeddings."""
        if self.index is None:
            return [[] for _ in ops]
        texts = [mapping.texts_to_embed(op, self.index.fields) for op in ops]
        flat = [t for ts in texts for t in ts]
        if not flat:
            return [[] for _ in ops]
        got = await self.index.embeddings.aembed_documents(flat)
        out, n = [], 0
        for ts in texts:
            out.append([list(map(float, v)) for v in got[n:n + len(ts)]])
            n += len(ts)
        return out

    async def _gets(self, ops: list[tuple[int, GetOp]], results: list[Result]
                    ) -> list[tuple[Awaitable[Any], Any]]:
        waits: list[tuple[Awaitable[Any], Any]] = []
        by_refresh: dict[bool, list[tuple[int, GetOp]]] = {}
        for i, op in ops:
            by_refresh.setdefault(self._refresh(op.refresh_ttl), []).append((i, op))
        for refresh, group in by_refresh.items():
            for k in range(0, len(group), MAX_KEYS):
                part = group[k:k + MAX_KEYS]
                keys = [mapping.get_key(op) for _, op in part]

                def done(reply: Any, part: list[tuple[int, GetOp]] = part) -> None:
                    found = {(tuple(e["key"][mapping.FIELD]), e["key"]["k"]): e
                             for e in reply.entries}
                    for i, op in part:
                        e = found.get((tuple(op.namespace), op.key))
                        results[i] = mapping.item_of(e) if e is not None else None

                waits.append((await self._send(MemoryRetrieveRequest(
                    id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(),
                    keys=keys, tier=self.tier, limit=len(keys),
                    refresh_ttl=refresh)), done))
        return waits

    async def _search(self, i: int, op: SearchOp, results: list[Result]
                      ) -> tuple[Awaitable[Any], Any]:
        fields = mapping.search_fields(op)
        if op.query and self.index is not None:
            vec = await self.index.embeddings.aembed_query(op.query)
            fields["vector"], fields["vector_space"] = list(map(float, vec)), self.space
        elif op.query:
            fields["query"] = op.query
        refresh = self._refresh(op.refresh_ttl)

        def done(reply: Any) -> None:
            results[i] = [mapping.item_of(e, search=True) for e in reply.entries]

        return (await self._send(MemoryRetrieveRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(), tier=self.tier,
            refresh_ttl=refresh, **fields)), done)

    async def _paths(self, i: int, op: ListNamespacesOp, results: list[Result]
                     ) -> tuple[Awaitable[Any], Any]:
        def done(reply: Any) -> None:
            results[i] = [tuple(p) for p in reply.paths]

        return (await self._send(MemoryPathsRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(), tier=self.tier,
            **mapping.paths_fields(op))), done)

    async def sweep(self) -> int:
        """Delete the store's expired items now; how many."""
        reply = await self.client.request(MemorySweepRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(), tier=self.tier))
        return int(reply.deleted)


def _ignore(reply: Any) -> None:
    return None


def _check_stored(reply: Any) -> None:
    if reply.errors:
        raise A2EStoreError("; ".join(reply.errors))


def _user_error(err: RemoteError) -> BaseException:
    """A host's `invalid_message` about a filter as LangGraph raises it (`ValueError`)."""
    if err.code == "invalid_message" and err.detail.get("field") in ("filter", "key_prefix"):
        return ValueError(str(err))
    return err


def _chunks(entries: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Store requests under the host's limits of entries and frame bytes (estimated)."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for e in entries:
        n = _estimate(e)
        if chunk and (len(chunk) >= MAX_ENTRIES or size + n > MAX_REQUEST_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(e)
        size += n
    if chunk:
        yield chunk


def _estimate(e: dict[str, Any]) -> int:
    vecs = e.get("vectors") or []
    return 200 + len(repr(e["content"])) + len(repr(e["key"])) + 24 * sum(len(v) for v in vecs)


def _ttl_interval(ttl: TTLConfig | None, minutes: float | None) -> float:
    return float(minutes or (ttl or {}).get("sweep_interval_minutes") or 5) * 60


class A2EStore(BaseStore):
    """LangGraph's `BaseStore` on an A2E host, sync first. Open it with `from_conn_string`."""

    supports_ttl = True

    def __init__(self, url: str, *, namespace: str = "langgraph", token: str | None = None,
                 index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 tier: Tier = "episodic", agent: str | None = None) -> None:
        """Connect (on a private event-loop thread) to the host at `url` and open a session in
        the A2E `namespace` as the token's agent (or `agent`); items go to `tier`."""
        self.index_config = index
        self.ttl_config = ttl
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="a2e-store")
        self._thread.start()
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()
        try:
            self._session = self._call(_Session.open(url, namespace, token, agent, tier,
                                                     index, ttl))
        except BaseException:
            self._shutdown()
            raise
        self.embeddings = self._session.index.embeddings if self._session.index else None

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str, *, namespace: str = "langgraph",
                         token: str | None = None, index: IndexConfig | None = None,
                         ttl: TTLConfig | None = None, tier: Tier = "episodic",
                         agent: str | None = None) -> Iterator[A2EStore]:
        """`with A2EStore.from_conn_string("ws://127.0.0.1:8765") as store:` (closed after)."""
        store = cls(url, namespace=namespace, token=token, index=index, ttl=ttl, tier=tier,
                    agent=agent)
        try:
            yield store
        finally:
            store.close()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def setup(self) -> None:
        """Check that the host answers (the host keeps its own schema: nothing to create)."""
        self._call(self._session.client.ping())

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

    def __init__(self, session: _Session, index: IndexConfig | None = None,
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
                               agent: str | None = None) -> AsyncIterator[AsyncA2EStore]:
        """Connect to the host at `url`, open a session in the A2E `namespace` as the
        token's agent (or `agent`), yield the store, and close it after."""
        session = await _Session.open(url, namespace, token, agent, tier, index, ttl)
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
        await self._session.client.ping()

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

