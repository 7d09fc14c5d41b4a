"""The round trips one keyword `memory/retrieve` makes to PostgreSQL, counted on the wire: a
proxy of the test's own between the host and a real server reads the frontend messages of
every connection (a Sync or a simple Query is one round trip, an Execute one statement).

A keyword retrieve is one statement, `a2e_keyword_query`: the candidates, their BM25 and the
neighbours of the best of them (each statement is a round trip, ~2-4 ms to a database 1 ms
away). Background work of the host (none here: no embedder) can only add, so each count is the
fewest over a few retrieves."""

from __future__ import annotations

import asyncio
import struct
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from support.hosts import make_config, running_host, url_of

from host.client import MemoryClient

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_WORDS = ("apple", "river", "stone", "cloud", "music", "garden", "winter", "copper")


class _Counting:
    """A TCP proxy to `port` that counts the frontend messages by type, every connection."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.messages: Counter[str] = Counter()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)

        async def backend() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        relay = asyncio.ensure_future(backend())
        try:
            while True:  # untyped first: SSL / GSS requests, then the startup message
                head = await reader.readexactly(8)
                up_writer.write(head)
                length, code = struct.unpack("!ii", head)
                if code not in (_SSL_REQUEST, _GSS_REQUEST):
                    up_writer.write(await reader.readexactly(length - 8))
                    break
            while True:
                head = await reader.readexactly(5)
                kind, length = head[:1].decode(), struct.unpack("!i", head[1:])[0]
                self.messages[kind] += 1
                up_writer.write(head + await reader.readexactly(length - 4))
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            up_writer.close()
            relay.cancel()

    def round_trips(self) -> int:
        return self.messages["S"] + self.messages["Q"]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@asynccontextmanager
async def _proxied(pg_url: str) -> AsyncIterator[tuple[str, _Counting]]:
    head, tail = pg_url.rsplit(":", 1)
    port, db = tail.split("/", 1)
    proxy = _Counting(int(port))
    try:
        yield f"{head}:{await proxy.start()}/{db}", proxy
    finally:
        proxy.close()


async def _fewest(proxy: _Counting, c: MemoryClient, runs: int = 5, **retrieve: object
                  ) -> tuple[int, int, list[object]]:
    """The fewest round trips and statements one retrieve made over `runs` (and its keys)."""
    trips, statements, keys = [], [], []
    for _ in range(runs):
        proxy.messages.clear()
        got = await c.retrieve(**retrieve)  # type: ignore[arg-type]
        trips.append(proxy.round_trips())
        statements.append(proxy.messages["E"])
        keys = [e["key"] for e in got.entries]
    return min(trips), min(statements), keys


async def test_a_keyword_retrieve_is_one_round_trip(pg_url: str) -> None:
    """A two-word keyword query over 200 matching entries: the candidates and the neighbours
    of the best of them come in one statement, one round trip (two when the neighbours were
    asked apart); a query with a filter of the extensions (`filter`, applied by the host after
    the statement) asks for the neighbours apart: two."""
    async with _proxied(pg_url) as (url, proxy):
        config = make_config(url, search={"embedder": "none"})
        async with running_host(config) as host:
            c = await MemoryClient.connect(url_of(host))
            await c.init("ns", {"agent": "a1"})
            await c.store([{"key": {"n": i}, "content": {
                "text": f"apple river {_WORDS[i % 8]} note {i}", "n": i}, "tier": "semantic"}
                for i in range(200)])
            # the best match: both words twice in a short text
            await c.store([{"key": {"n": "best"}, "content": {"text": "apple river apple river",
                                                              "n": 200}, "tier": "semantic"}])
            for _ in range(3):  # the pool's connections prepare their statements
                await c.retrieve(query="apple river", limit=10)
            trips, statements, keys = await _fewest(proxy, c, query="apple river", limit=10)
            assert (trips, statements) == (1, 1)
            assert {"n": "best"} in keys
            trips, _, _ = await _fewest(proxy, c, query="apple river", limit=10,
                                        filter={"n": {"$gte": 0}})
            assert trips == 2
            await c.close()


async def test_a_retrieve_over_working_entries_is_one_round_trip(pg_url: str) -> None:
    """A keyword query that also reads the session's working tier scores its working entries
    with the store's BM25 statistics, which come in the keyword statement (two round trips
    when they were asked apart); the working entries are in the reply, ranked with the stored
    ones. A query of the working tier alone asks for the statistics alone: one round trip."""
    async with _proxied(pg_url) as (url, proxy):
        config = make_config(url, search={"embedder": "none"})
        async with running_host(config) as host:
            c = await MemoryClient.connect(url_of(host))
            await c.init("ns", {"agent": "a1"})
            await c.store([{"key": {"n": i}, "content": f"apple river {_WORDS[i % 8]} note {i}",
                            "tier": "semantic"} for i in range(100)])
            await c.store([{"key": {"w": i}, "content": f"apple {_WORDS[i % 8]} scratch {i}",
                            "tier": "working"} for i in range(20)])
            await c.store([{"key": {"w": "best"}, "content": "apple river apple river",
                            "tier": "working"}])
            for _ in range(3):  # the pool's connections prepare their statements
                await c.retrieve(query="apple river", limit=10)
            trips, statements, keys = await _fewest(proxy, c, query="apple river", limit=10)
            assert (trips, statements) == (1, 1)
            assert {"w": "best"} in keys and any("n" in k for k in keys)  # type: ignore[operator]
            trips, statements, keys = await _fewest(proxy, c, query="apple river", limit=10,
                                                    tier="working")
            assert (trips, statements) == (1, 1)
            assert {"w": "best"} in keys
            await c.close()
