"""`A2EStore` and `AsyncA2EStore`: LangGraph's `BaseStore` on an A2E memory host, over the wire.

Both run one `_Session` (a `host.client.MemoryClient` connection with one memory session,
opened again when the connection ended) and turn a batch of LangGraph ops into wire requests,
all built and checked before any is sent (frame sizes included), then sent in op order,
pipelined on that connection: runs of puts are `memory/store` requests cut by size (and one
`memory/forget` for the deletions), runs of gets one `memory/retrieve` by keys, each search a
retrieve with the store extensions (`filter`, `key_prefix`, `offset`, `query` or `vector`,
`refresh_ttl`; with a query, a second, plain one fills the page as LangGraph's stores do),
each namespace listing one `memory/paths`. Replies on one connection come in request order
and each read sees the writes before it, so a batch costs one round trip whatever its size.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    tokenize_path,
    validate_op_namespace,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore
from websockets.exceptions import ConnectionClosed

from host.client import MemoryClient, RemoteError
from host.langgraph import mapping
from protocol.codec import encode, new_id, now
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
MAX_FRAME_BYTES = 1024 * 1024  # the host's default `limits.max_frame_bytes`
_ENVELOPE_SLACK = 64  # bytes a store request's envelope may vary by (its `ts`)
FILL_MAX = 1000  # the host's default `limits.max_limit`: a query search fills pages up to it
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


Done = Callable[[Any], None]
Plan = list[tuple[Any, Done]]  # a batch's requests, each with what its reply does


class _Session:
    """One memory session on a connection, opened again when the connection ended; every
    coroutine runs on the loop that opened it."""

    def __init__(self, opener: Callable[[], Awaitable[MemoryClient]], client: MemoryClient,
                 tier: Tier, index: _Index | None, ttl: TTLConfig | None,
                 min_score: float | None, max_frame_bytes: int) -> None:
        self._opener = opener
        self.client = client
        self.tier = tier
        self.index = index
        self.ttl = ttl
        self.min_score = min_score
        self.max_frame_bytes = max_frame_bytes
        self.space = mapping.space_of(index.dims) if index is not None else ""
        self._reopen = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, url: str, namespace: str, token: str | None, agent: str | None,
                   tier: Tier, index: IndexConfig | None, ttl: TTLConfig | None,
                   min_score: float | None = None,
                   max_frame_bytes: int = MAX_FRAME_BYTES) -> _Session:
        """Connect to the host at `url` (ws://, wss://, http:// or https://) and open a session."""
        if not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"an A2E host address is ws://, wss://, http:// or https://: {url}")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        resolved = _Index.of(index)  # a bad config raises before any connection

        async def opener() -> MemoryClient:
            if url.startswith(("http://", "https://")):
                client = await MemoryClient.connect_http(url, headers or None)
            else:
                client = await MemoryClient.connect(url, additional_headers=headers or None)
            try:
                await client.init(namespace, {"agent": agent} if agent else {})
            except BaseException:
                await client.close()
                raise
            return client

        return cls(opener, await opener(), tier, resolved, ttl, min_score, max_frame_bytes)

    async def close(self) -> None:
        self._closed = True
        await self.client.close()

    async def live(self) -> MemoryClient:
        """The session's client: a new connection and session when the last one ended (the
        host restarted or closed it, the network dropped), so one failed call never breaks
        the store. Raises what connecting raises (the next call tries again)."""
        if self._closed:
            raise RuntimeError("the store is closed")
        if _ended(self.client):
            async with self._reopen:
                if _ended(self.client):
                    await asyncio.gather(self.client.close(), return_exceptions=True)
                    self.client = await self._opener()
        return self.client

    # -- one batch --------------------------------------------------------------------

    async def run(self, ops: Sequence[Op]) -> list[Result]:
        """The results of `ops`, in order. Every request is built and checked first (a bad
        value, filter or a request over the frame limit raises before anything is sent),
        then all are sent before any reply is awaited."""
        for op in ops:
            validate_op_namespace(op)
        client = await self.live()
        mid = client.memory_id
        assert mid is not None
        results: list[Result] = [None] * len(ops)
        plan: Plan = []
        refresh: list[int] = []  # searches whose items' TTL restarts after the replies
        i = 0
        while i < len(ops):
            op = ops[i]
            j = i + 1
            if isinstance(op, (PutOp, GetOp)):  # a run of the same kind goes together
                while j < len(ops) and type(ops[j]) is type(op):
                    j += 1
            if isinstance(op, PutOp):
                plan += await self._puts(mid, ops[i:j])  # type: ignore[arg-type]
            elif isinstance(op, GetOp):
                plan += self._gets(mid, [(k, ops[k]) for k in range(i, j)], results)  # type: ignore[misc]
            elif isinstance(op, SearchOp):
                plan += await self._search(mid, i, op, results, refresh)
            elif isinstance(op, ListNamespacesOp):
                plan += self._paths(mid, i, op, results)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
            i = j
        errors = await _exchange(client, plan)
        if not errors and refresh:
            errors = await _exchange(client, self._refreshes(mid, refresh, results))
        if errors:
            raise errors[0]
        return results

    def _refresh(self, asked: bool) -> bool:
        """Whether a read refreshes TTLs: asked for, and the TTL config's `refresh_on_read`
        is set (as LangGraph's SQLite store decides)."""
        return bool(asked and self.ttl and self.ttl.get("refresh_on_read", False))

    def _fits(self, msg: Any) -> Any:
        """`msg`, or `A2EStoreError` when its frame would be over `max_frame_bytes`."""
        n = len(encode(msg))
        if n > self.max_frame_bytes:
            raise A2EStoreError(
                f"a {type(msg).__name__} of {n:,} bytes is over the frame limit of"
                f" {self.max_frame_bytes:,} (max_frame_bytes); nothing of this batch was sent")
        return msg

    def _retrieve(self, mid: str, **fields: Any) -> MemoryRetrieveRequest:
        return self._fits(MemoryRetrieveRequest(  # type: ignore[no-any-return]
            id=new_id(), version=VERSION, ts=now(), memory_id=mid, tier=self.tier, **fields))

    async def _puts(self, mid: str, ops: list[PutOp]) -> Plan:
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:  # LangGraph's rule: the last put of a key wins
            last[(tuple(op.namespace), op.key)] = op
        kept = list(last.values())
        for op in kept:
            if op.value is not None:
                mapping.check_value(op.value)
        vectors = await self._embed(kept)
        entries: list[tuple[PutOp, bytes]] = []
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
            entries.append((op, encode(e)))
        plan: Plan = [(MemoryStoreRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=mid,
            entries=[msgspec.Raw(raw) for raw in chunk]), _check_stored)
            for chunk in self._chunks(mid, entries)]
        for k in range(0, len(deletes), MAX_KEYS):
            plan.append((self._fits(MemoryForgetRequest(
                id=new_id(), version=VERSION, ts=now(), memory_id=mid,
                keys=deletes[k:k + MAX_KEYS], tier=self.tier)), _ignore))
        return plan

    def _chunks(self, mid: str, entries: list[tuple[PutOp, bytes]]) -> list[list[bytes]]:
        """The encoded entries in store requests of at most `MAX_ENTRIES` entries and
        `max_frame_bytes` bytes (sizes exact, but the envelope's few varying bytes); a put that
        fits no request is `A2EStoreError`, before anything is sent."""
        base = len(encode(MemoryStoreRequest(id=new_id(), version=VERSION, ts=now(),
                                             memory_id=mid))) + _ENVELOPE_SLACK
        out: list[list[bytes]] = []
        chunk: list[bytes] = []
        size = base
        for op, raw in entries:
            n = len(raw) + 1  # and its comma
            if base + n > self.max_frame_bytes:
                raise A2EStoreError(_too_big(op, base + n, self.max_frame_bytes))
            if chunk and (len(chunk) >= MAX_ENTRIES or size + n > self.max_frame_bytes):
                out.append(chunk)
                chunk, size = [], base
            chunk.append(raw)
            size += n
        if chunk:
            out.append(chunk)
        return out

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
            out.append(mapping.unit_vectors(got[n:n + len(ts)]) if ts else [])
            n += len(ts)
        return out

    def _gets(self, mid: str, ops: list[tuple[int, GetOp]], results: list[Result]) -> Plan:
        plan: Plan = []
        by_refresh: dict[bool, list[tuple[int, GetOp]]] = {}
        for i, op in ops:
            by_refresh.setdefault(self._refresh(op.refresh_ttl), []).append((i, op))
        for refresh, group in by_refresh.items():
            for k in range(0, len(group), MAX_KEYS):
                part = group[k:k + MAX_KEYS]
                keys = [mapping.get_key(op) for _, op in part]

                def done(reply: Any, part: list[tuple[int, GetOp]] = part) -> None:
                    found = {(it.namespace, it.key): it for it in _items(reply)}
                    for i, op in part:
                        results[i] = found.get((tuple(op.namespace), op.key))

                plan.append((self._retrieve(mid, keys=keys, limit=len(keys),
                                            refresh_ttl=refresh), done))
        return plan

    async def _search(self, mid: str, i: int, op: SearchOp, results: list[Result],
                      refresh: list[int]) -> Plan:
        """A search's requests. Without a query one read, newest first. With one (and no
        `min_score`), LangGraph's semantics: `limit` items whenever the prefix and filter hold
        that many, those the search ranks first (scored), then the others (score None), as
        LangGraph's InMemoryStore fills a page with the items it has no vectors of: the ranked
        read and a plain read of the first `offset + limit`, pipelined, merged here."""
        if op.limit <= 0:  # LangGraph's stores: nothing
            results[i] = []
            return []
        fields = mapping.search_fields(op)
        scored = dict(fields)
        if op.query and self.index is not None:
            vec = await self.index.embeddings.aembed_query(op.query)
            scored["vector"] = mapping.unit_vectors([vec])[0]
            scored["vector_space"] = self.space
        elif op.query:
            scored["query"] = op.query
        asked = self._refresh(op.refresh_ttl)

        def page(reply: Any) -> None:
            results[i] = _items(reply, search=True)

        start, end = fields["offset"], fields["offset"] + fields["limit"]
        if not op.query:
            return [(self._retrieve(mid, refresh_ttl=asked, **fields), page)]
        if self.min_score is not None or end > FILL_MAX:
            return [(self._retrieve(mid, refresh_ttl=asked, min_score=self.min_score or 0.0,
                                    **scored), page)]
        ranked: list[SearchItem] = []

        def first(reply: Any) -> None:
            ranked[:] = _items(reply, search=True)

        def rest(reply: Any) -> None:
            seen = {(it.namespace, it.key) for it in ranked}
            more = [it for it in _items(reply, search=True) if (it.namespace, it.key) not in seen]
            results[i] = (ranked + more)[start:end]

        if asked:
            refresh.append(i)
        return [(self._retrieve(mid, **{**scored, "offset": 0, "limit": end}), first),
                (self._retrieve(mid, **{**fields, "offset": 0, "limit": end}), rest)]

    def _refreshes(self, mid: str, searches: list[int], results: list[Result]) -> Plan:
        """Reads by key that restart the TTL of the items the `searches` returned."""
        items: list[SearchItem] = [it for i in searches for it in results[i] or []]  # type: ignore[misc,union-attr]
        keys = [mapping.entry_key(it.namespace, it.key) for it in items]
        parts = [keys[k:k + MAX_KEYS] for k in range(0, len(keys), MAX_KEYS)]
        return [(self._retrieve(mid, keys=part, limit=len(part), refresh_ttl=True), _ignore)
                for part in parts]

    def _paths(self, mid: str, i: int, op: ListNamespacesOp, results: list[Result]) -> Plan:
        if op.limit <= 0:  # LangGraph's stores: nothing
            results[i] = []
            return []

        def done(reply: Any) -> None:
            results[i] = [tuple(p) for p in reply.paths if p]

        return [(self._fits(MemoryPathsRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=mid, tier=self.tier,
            **mapping.paths_fields(op))), done)]

    async def ping(self) -> None:
        await (await self.live()).ping()

    async def sweep(self) -> int:
        """Delete the store's expired items now; how many."""
        client = await self.live()
        reply = await client.request(MemorySweepRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=client.memory_id or "",
            tier=self.tier))
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


def _ended(client: MemoryClient) -> bool:
    """Whether `client`'s connection ended (its reader task ends with the connection)."""
    return client._reader.done()


async def _exchange(client: MemoryClient, plan: Plan) -> list[BaseException]:
    """Send every request of `plan`, then hand each reply to its `done`, in order; the
    errors, every reply awaited even after one (a closed connection fails them all)."""
    waits: list[tuple[Awaitable[Any], Done]] = []
    try:
        for msg, done in plan:
            waits.append((await client.submit(msg), done))
    except BaseException:
        await asyncio.gather(*(w for w, _ in waits), return_exceptions=True)
        raise
    errors: list[BaseException] = []
    for fut, done in waits:
        try:
            done(await fut)
        except RemoteError as err:
            errors.append(_user_error(err))
        except ConnectionClosed as err:
            errors.append(_closed(err))
        except Exception as err:  # noqa: BLE001 - raised after every reply arrived
            errors.append(err)
    return errors


def _items(reply: Any, search: bool = False) -> list[Any]:
    """The items of a retrieve reply, entries other clients wrote left out."""
    return [it for e in reply.entries if (it := mapping.item_of(e, search)) is not None]


def _too_big(op: PutOp, size: int, limit: int) -> str:
    value = len(encode(op.value))
    return (f"the put of {tuple(op.namespace)!r}, {op.key!r} would be a frame of {size:,} bytes"
            f" ({value:,} of value, the rest its vectors), over the host's frame limit of"
            f" {limit:,} (max_frame_bytes, the host's limits.max_frame_bytes): index fewer"
            " fields (the put's index=[...] or index=False, the store's index fields), or"
            " raise both limits. Nothing of this batch was sent")


def _closed(err: ConnectionClosed) -> BaseException:
    """A close by the host over a frame's size (1009) as an `A2EStoreError` that says so."""
    if err.rcvd is not None and err.rcvd.code == 1009:
        e = A2EStoreError("the host closed the connection: a request was over its frame limit"
                          " (1009); set the store's max_frame_bytes to the host's"
                          " limits.max_frame_bytes. The next call opens a new connection")
        e.__cause__ = err
        return e
    return err


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
            self._session = self._call(_Session.open(url, namespace, token, agent, tier,
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
                               agent: str | None = None, min_score: float | None = None,
                               max_frame_bytes: int = MAX_FRAME_BYTES,
                               ) -> AsyncIterator[AsyncA2EStore]:
        """Connect to the host at `url`, open a session in the A2E `namespace` as the
        token's agent (or `agent`), yield the store, and close it after (the parameters:
        `A2EStore`)."""
        session = await _Session.open(url, namespace, token, agent, tier, index, ttl,
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

