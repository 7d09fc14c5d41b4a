"""A small async client for the A2E memory protocol, used by tests, scripts and agents.

    async with await MemoryClient.connect("ws://127.0.0.1:8765") as c:
        await c.init("my-namespace", {"agent": "me"})
        await c.store([{"key": {"k": 1}, "content": "hello", "tier": "episodic"}])
        reply = await c.retrieve(query="hello")

The same client speaks HTTP + SSE (`MemoryClient.connect_http("http://127.0.0.1:8765")`) and
stdio (`MemoryClient.spawn(["a2e-host", "stdio", "--db", path])`), as the A2E SDK's transports
do. Requests may be pipelined (call several methods concurrently); replies are matched to
requests by `req_id`. An `error` reply raises `RemoteError`. Events of a watch (`watch()`) go to the
`events` queue (`next_event()`), in the order the host sent them.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from protocol.codec import decode_message, encode, new_id, now
from protocol.messages import (
    VERSION,
    Error,
    HandshakeRequest,
    HandshakeResponse,
    MemoryChangedEvent,
    MemoryForgetRequest,
    MemoryHistoryRequest,
    MemoryHistoryResponse,
    MemoryInitRequest,
    MemoryInitResponse,
    MemoryPathsRequest,
    MemoryPathsResponse,
    MemoryRetrieveRequest,
    MemoryRetrieveResponse,
    MemoryStoreRequest,
    MemoryStoreResponse,
    MemorySweepRequest,
    MemorySweepResponse,
    MemoryUnwatchRequest,
    MemoryUsageRequest,
    MemoryUsageResponse,
    MemoryWatchEndedEvent,
    MemoryWatchRequest,
    MemoryWatchResponse,
    Ping,
    Pong,
)

__all__ = ["Channel", "MemoryClient", "RemoteError"]


class RemoteError(Exception):
    """The host answered with an `error` reply."""

    def __init__(self, reply: Error) -> None:
        super().__init__(f"{reply.code}: {reply.message}")
        self.reply = reply
        self.code = reply.code
        self.detail = reply.detail
        self.retryable = reply.retryable


class Channel(Protocol):
    """One transport's way to carry a client's messages: text out, text in, in order."""

    async def send(self, text: str) -> None:
        """Send one message."""

    def __aiter__(self) -> AsyncIterator[str]:
        """The messages from the host until the channel ends."""

    async def close(self) -> None:
        """End the channel (the host ends the session)."""


class _WebSocket:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, text: str) -> None:
        await self.ws.send(text, text=True)

    async def __aiter__(self) -> AsyncIterator[str]:
        async for frame in self.ws:
            yield frame if isinstance(frame, str) else frame.decode()

    async def close(self) -> None:
        await self.ws.close()


class MemoryClient:
    """One connection (or session) to a host. Create with `await MemoryClient.connect(url)`
    (WebSocket), `connect_http(base_url)` (HTTP + SSE) or `spawn(argv)` (stdio)."""

    def __init__(self, channel: Channel | ClientConnection) -> None:
        self.channel: Channel = _WebSocket(channel) if isinstance(channel, ClientConnection) \
            else channel
        self.memory_id: str | None = None
        self._pending: OrderedDict[str, asyncio.Future[Any]] = OrderedDict()
        self.events: asyncio.Queue[MemoryChangedEvent | MemoryWatchEndedEvent] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> MemoryClient:
        """Open a WebSocket (`kwargs` go to `websockets.connect`, e.g. `additional_headers`)."""
        kwargs.setdefault("compression", None)
        kwargs.setdefault("max_size", None)
        return cls(await connect(url, **kwargs))

    @classmethod
    async def connect_http(cls, base_url: str, headers: dict[str, str] | None = None) -> MemoryClient:
        """Open an HTTP + SSE session at `base_url` (`http://host:port`), as the A2E SDK's
        `HTTPTransport` does; `headers` go with every request (e.g. `Authorization`)."""
        from host.net.clients import HttpChannel

        return cls(await HttpChannel.open(base_url, headers))

    @classmethod
    async def spawn(cls, argv: list[str], **kwargs: Any) -> MemoryClient:
        """Start `argv` (e.g. `["a2e-host", "stdio", "--db", path]`) and speak NDJSON over its
        stdin and stdout, as the SDK's `SubprocessTransport` does (`kwargs`: `env`, `stderr`)."""
        from host.net.clients import StdioChannel

        return cls(await StdioChannel.spawn(argv, **kwargs))

    async def __aenter__(self) -> MemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; pending requests fail with `ConnectionClosed` (WebSocket) or
        `ConnectionError`."""
        await self.channel.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        try:
            async for frame in self.channel:
                msg = decode_message(frame)
                if isinstance(msg, (MemoryChangedEvent, MemoryWatchEndedEvent)):
                    self.events.put_nowait(msg)
                    continue
                rid = getattr(msg, "req_id", "")
                fut = self._pending.pop(rid, None) if rid else None
                if fut is None and self._pending:  # no usable req_id: replies are in order
                    _, fut = self._pending.popitem(last=False)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except ConnectionClosed as exc:
            err: BaseException = exc
        except BaseException as exc:  # noqa: BLE001 - surfaced to every waiter
            err = exc
        else:
            err = ConnectionError("connection closed")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()

    async def request(self, msg: Any) -> Any:
        """Send a request struct and wait for its reply; raises `RemoteError` on `error`."""
        return await (await self.submit(msg))

    async def submit(self, msg: Any) -> Awaitable[Any]:
        """Send a request struct now and return the awaitable of its reply (which raises
        `RemoteError` on `error`): requests submitted one after the other are sent, and so
        answered, in that order, with no round trip between them (pipelining)."""
        if self._reader.done():  # the connection ended: no reply could ever come
            raise ConnectionError("connection closed")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg.id] = fut
        try:
            await self.channel.send(encode(msg).decode())
        except BaseException:
            # not sent: its reply will never come, and the end of the connection must not
            # be set on a future nobody awaits ("Future exception was never retrieved")
            self._pending.pop(msg.id, None)
            fut.cancel()
            raise
        return self._reply(fut)

    @staticmethod
    async def _reply(fut: asyncio.Future[Any]) -> Any:
        reply = await fut
        if isinstance(reply, Error):
            raise RemoteError(reply)
        return reply

    def _mid(self, memory_id: str | None) -> str:
        mid = memory_id or self.memory_id
        if mid is None:
            raise RuntimeError("call init() first or pass memory_id")
        return mid

    async def handshake(
        self, agent_id: str = "", caps: list[str] | None = None, auth_token: str = ""
    ) -> HandshakeResponse:
        """Introduce the agent (and authenticate, when the host requires a token)."""
        return await self.request(HandshakeRequest(
            id=new_id(), version=VERSION, ts=now(), agent_id=agent_id,
            agent_caps=caps if caps is not None else ["memory"], auth_token=auth_token))

    async def init(self, namespace: str, scope: dict[str, Any] | None = None,
                   metadata: dict[str, Any] | None = None) -> str:
        """Open a memory session; remembers and returns its `memory_id`."""
        reply: MemoryInitResponse = await self.request(MemoryInitRequest(
            id=new_id(), version=VERSION, ts=now(), namespace=namespace, scope=scope or {},
            metadata=metadata or {}))
        self.memory_id = reply.memory_id
        return reply.memory_id

    async def store(self, entries: list[dict[str, Any]],
                    memory_id: str | None = None) -> MemoryStoreResponse:
        """Write entries (dicts with key, content, tier, ...)."""
        return await self.request(MemoryStoreRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            entries=entries))  # type: ignore[arg-type]

    async def retrieve(self, *, keys: list[dict[str, Any]] | None = None, query: str = "",
                       tags: list[str] | None = None, tier: str = "", limit: int = 10,
                       min_score: float = 0.0,
                       memory_id: str | None = None, **extensions: Any
                       ) -> MemoryRetrieveResponse:
        """Read entries matching every given criterion; `extensions` are the store
        extensions' fields (`filter`, `key_prefix`, `offset`, `vector`, `vector_space`,
        `refresh_ttl`)."""
        return await self.request(MemoryRetrieveRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            keys=keys or [], query=query, tags=tags or [], tier=tier,  # type: ignore[arg-type]
            limit=limit, min_score=min_score, **extensions))

    async def paths(self, *, field: str = "ns", tier: str = "", prefix: list[str] | None = None,
                    suffix: list[str] | None = None, max_depth: int = 0, limit: int = 100,
                    offset: int = 0, memory_id: str | None = None) -> list[list[str]]:
        """The distinct key paths under key member `field` (the store extension)."""
        reply: MemoryPathsResponse = await self.request(MemoryPathsRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            field=field, tier=tier, prefix=prefix or [], suffix=suffix or [],  # type: ignore[arg-type]
            max_depth=max_depth, limit=limit, offset=offset))
        return reply.paths

    async def sweep(self, *, tier: str = "", memory_id: str | None = None) -> int:
        """Delete the namespace's expired entries now (the store extension); how many."""
        reply: MemorySweepResponse = await self.request(MemorySweepRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            tier=tier))  # type: ignore[arg-type]
        return int(reply.deleted)

    async def forget(self, *, keys: list[dict[str, Any]] | None = None,
                     tags: list[str] | None = None, tier: str = "episodic",
                     memory_id: str | None = None) -> int:
        """Delete matching entries; the number deleted."""
        reply = await self.request(MemoryForgetRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            keys=keys or [], tags=tags or [], tier=tier))  # type: ignore[arg-type]
        return int(reply.deleted)

    async def history(self, key: dict[str, Any], *, tier: str = "", limit: int = 10,
                      memory_id: str | None = None) -> list[dict[str, Any]]:
        """The versions of the entry at `key`, newest first: the current one, then the earlier
        contents the host keeps (the history extension)."""
        reply: MemoryHistoryResponse = await self.request(MemoryHistoryRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            key=key, tier=tier, limit=limit))  # type: ignore[arg-type]
        return reply.versions

    async def usage(self, memory_id: str | None = None) -> MemoryUsageResponse:
        """What the session's namespace, agent and working tier hold against their quotas
        (the usage extension)."""
        return await self.request(MemoryUsageRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id)))

    async def watch(self, *, tier: str = "", tags: list[str] | None = None,
                    keys: list[dict[str, Any]] | None = None, since: str = "",
                    memory_id: str | None = None) -> MemoryWatchResponse:
        """Follow the session's changes (the watch extension); events go to `events`."""
        return await self.request(MemoryWatchRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            tier=tier, tags=tags or [], keys=keys or [], since=since))  # type: ignore[arg-type]

    async def unwatch(self, watch_id: str, memory_id: str | None = None) -> None:
        """End a watch; no event of it follows."""
        await self.request(MemoryUnwatchRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=self._mid(memory_id),
            watch_id=watch_id))

    async def next_event(self, timeout: float = 10.0) -> MemoryChangedEvent | MemoryWatchEndedEvent:
        """The next event of any watch of this connection; `TimeoutError` after `timeout` s."""
        async with asyncio.timeout(timeout):
            return await self.events.get()

    async def ping(self) -> Pong:
        """Liveness check."""
        return await self.request(Ping(id=new_id(), version=VERSION, ts=now()))
