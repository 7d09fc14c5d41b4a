"""Change streams over the HTTP + SSE session: a watch opened with `POST /send` sends its
events on the session's stream, after the watch's reply, as on WebSocket."""

from __future__ import annotations

from pathlib import Path

from authkit import running
from support.hosts import url_of

from host.client import MemoryClient
from protocol.messages import MemoryChangedEvent


async def test_a_watch_over_http_sse_gets_the_events_of_a_websocket_writer(
    db_path: Path,
) -> None:
    """A session over HTTP + SSE watches its namespace; a store through a WebSocket client is
    one event on the session's stream; a cursor from it resumes on a new HTTP session."""
    async with running(db_path, search={"embedder": "none"}) as host:
        base = f"http://127.0.0.1:{host.port}"
        watcher = await MemoryClient.connect_http(base)
        writer = await MemoryClient.connect(url_of(host))
        try:
            await watcher.init("ns", {"agent": "a1"})
            await writer.init("ns", {"agent": "a2"})
            await watcher.watch()
            await writer.store([{"key": {"k": 1}, "content": "one", "tier": "semantic"}])
            ev = await watcher.next_event()
            assert isinstance(ev, MemoryChangedEvent) and ev.op == "stored"
            assert [e["key"] for e in ev.entries] == [{"k": 1}]
            await watcher.close()
            await writer.store([{"key": {"k": 2}, "content": "two", "tier": "semantic"}])
            watcher = await MemoryClient.connect_http(base)
            await watcher.init("ns", {"agent": "a1"})
            await watcher.watch(since=ev.cursor)
            again = await watcher.next_event()
            assert isinstance(again, MemoryChangedEvent)
            assert [e["key"] for e in again.entries] == [{"k": 2}]
        finally:
            await watcher.close()
            await writer.close()
