"""One memory session on a connection to the host, opened again when the connection ended;
a batch's requests (`host.langgraph.plans`) sent in op order, pipelined on it: replies on one
connection come in request order and each read sees the writes before it, so a batch costs
one round trip whatever its size."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langgraph.store.base import IndexConfig, Op, Result, TTLConfig, validate_op_namespace
from websockets.exceptions import ConnectionClosed

from host.client import MemoryClient, RemoteError
from host.langgraph.plans import (
    MAX_FRAME_BYTES,
    A2EStoreError,
    Done,
    Index,
    Plan,
    Planner,
    Tier,
)
from protocol.codec import new_id, now
from protocol.messages import VERSION, MemorySweepRequest


class Session:
    """One memory session on a connection, opened again when the connection ended; every
    coroutine runs on the loop that opened it."""

    def __init__(self, opener: Callable[[], Awaitable[MemoryClient]], client: MemoryClient,
                 planner: Planner) -> None:
        self._opener = opener
        self.client = client
        self.planner = planner
        self.tier = planner.tier
        self.index = planner.index
        self._reopen = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, url: str, namespace: str, token: str | None, agent: str | None,
                   tier: Tier, index: IndexConfig | None, ttl: TTLConfig | None,
                   min_score: float | None = None,
                   max_frame_bytes: int = MAX_FRAME_BYTES) -> Session:
        """Connect to the host at `url` (ws://, wss://, http:// or https://) and open a session."""
        if not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"an A2E host address is ws://, wss://, http:// or https://: {url}")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        resolved = Index.of(index)  # a bad config raises before any connection

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

        planner = Planner(tier, resolved, ttl, min_score, max_frame_bytes)
        return cls(opener, await opener(), planner)

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
        refresh: list[int] = []  # searches whose items' TTL restarts after the replies
        errors = await _exchange(client, await self.planner.plan(mid, ops, results, refresh))
        if not errors and refresh:
            errors = await _exchange(client, self.planner.refreshes(mid, refresh, results))
        if errors:
            raise errors[0]
        return results

    async def ping(self) -> None:
        await (await self.live()).ping()

    async def sweep(self) -> int:
        """Delete the store's expired items now; how many."""
        client = await self.live()
        reply = await client.request(MemorySweepRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=client.memory_id or "",
            tier=self.tier))
        return int(reply.deleted)


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


def _closed(err: ConnectionClosed) -> BaseException:
    """A close by the host over a frame's size (1009) as an `A2EStoreError` that says so."""
    if err.rcvd is not None and err.rcvd.code == 1009:
        e = A2EStoreError("the host closed the connection: a request was over its frame limit"
                          " (1009); set the store's max_frame_bytes to the host's"
                          " limits.max_frame_bytes. The next call opens a new connection")
        e.__cause__ = err
        return e
    return err
