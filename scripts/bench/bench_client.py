"""The load client of `bench_host.py`: one process driving many WebSocket connections (or
HTTP + SSE sessions, for a `http://` URL).

It is built on picows (a Cython WebSocket library) so that it costs less per message than the
server it measures. The orchestrator talks to it with one JSON object a line on stdin, and it
answers each command with one JSON object a line on stdout:

    {"cmd": "connect", "url": U, "first": 0, "count": N}     open N connections (ids first..)
    {"cmd": "init", "namespace": NS, "agents": 100}          a memory session per connection
    {"cmd": "preload", "namespace": NS, "per_agent": 100}    entries the read cases look up
    {"cmd": "run", "case": C, "namespace": NS, "depth": D,   drive every connection, see `run`
     "start": T, "warmup": W, "duration": S, "keys": K}
    {"cmd": "rss"}                                           this process's RSS in KiB
    {"cmd": "close"}                                         close the connections and exit

Cases (the frames are built from templates here, the same for the host and the echo server):
store1, store20, get_key, get_tags, get_query, forget.

An HTTP + SSE session (`_HttpConn`) sends each frame as one `POST /send` on a kept-alive
connection (HTTP/1.1 pipelining: it does not wait for the 202 before the next) and reads the
replies from its `GET /stream`, as the A2E SDK's `HTTPTransport` does but without a thread.
"""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

__all__ = ["CASES", "WORDS", "frame_maker", "sentence"]

def _words(count: int = 2048) -> tuple[str, ...]:
    """`count` distinct pronounceable pseudo-words (two or three syllables), fixed order."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    out: dict[str, None] = {}
    x = 7
    while len(out) < count:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        n = 2 + (x >> 20) % 2
        out["".join(syllables[(x >> (5 * i)) % len(syllables)] for i in range(n))] = None
    return tuple(out)


# A vocabulary skewed like text: word i is drawn with probability falling with i (the first 20
# words make ~10% of the draws), so a two-word query matches a small share of the entries.
WORDS = _words()

CASES: tuple[str, ...] = ("store1", "store20", "get_key", "get_tags", "get_query", "forget")
_ERROR = b'"type":"error"'
_PRELOAD_BATCH = 20
_NO_SESSION = "00000000-0000-4000-8000-000000000000"  # the echo server's frames: same size


def sentence(n: int, length: int = 8) -> str:
    """A deterministic sentence of `length` words, the `n`-th of the sequence."""
    out = []
    x = n * 2654435761 + 12345
    for _ in range(length):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        u = (x % 1_000_003) / 1_000_003
        out.append(WORDS[int(len(WORDS) * u * u)])
    return " ".join(out)


_SENTENCES = [sentence(i) for i in range(4096)]
_QUERIES = [sentence(i + 7_000_000, 2) for i in range(4096)]


def _entry(c: int, n: int, j: str = "") -> str:
    """One store entry; with `j`, a template whose key and content take `%(n)d`."""
    if j:
        return ('{"key":{"c":%d,"n":%%(n)d,"j":%s},"content":{"text":"%s","turn":%%(n)d},'
                '"tier":"episodic","tags":["bench","t%s"]}' % (c, j, _SENTENCES[int(j)], j[-1]))
    return ('{"key":{"c":%d,"n":%d},"content":{"text":"%s","turn":%d},'
            '"tier":"episodic","tags":["bench","t%d"]}' % (c, n, _SENTENCES[n % 4096], n, n % 10))


def frame_maker(case: str, mid: str, c: int, agent: int, keys: int) -> Callable[[int], bytes]:
    """A function n -> the n-th request frame of `case` for connection `c` (session `mid`).

    Frames come from templates so that building one costs the client a few microseconds."""
    store, retrieve, forget = (
        '{"type":"memory/' + kind + '/req","version":"1.0","id":"%d","memory_id":"' + mid + '",'
        for kind in ("store", "retrieve", "forget")
    )
    if case == "store1":
        return lambda n: ((store % n) + '"entries":[' + _entry(c, n) + "]}").encode()
    if case == "store20":
        batch = (store.replace("%d", "%(n)d") + '"entries":['
                 + ",".join(_entry(c, 0, str(j)) for j in range(20)) + "]}")
        return lambda n: (batch % {"n": n}).encode()
    if case == "get_key":
        return lambda n: ((retrieve % n)
                          + '"keys":[{"a":%d,"p":%d}]}' % (agent, n % keys)).encode()
    if case == "get_tags":
        return lambda n: ((retrieve % n) + '"tags":["t%d"],"limit":10}' % (n % 10)).encode()
    if case == "get_query":
        return lambda n: ((retrieve % n) + '"query":"%s","limit":10}' % _QUERIES[n % 4096]).encode()
    if case == "forget":
        return lambda n: ((forget % n) + '"keys":[{"c":%d,"n":%d}]}' % (c, n)).encode()
    raise ValueError(f"unknown case {case!r}")


class _Conn(WSListener):
    """One connection: request/reply for set-up, a self-driving send loop for a run."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.t: WSTransport | None = None
        self.waiting: deque[asyncio.Future[bytes]] = deque()
        self.sent: deque[float] = deque()
        self.make: Callable[[int], bytes] | None = None
        self.n = 0
        self.sessions: dict[str, str] = {}

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.t = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            self.reply(frame.get_payload_as_bytes())

    def _write(self, frame: bytes) -> None:
        assert self.t is not None
        self.t.send(WSMsgType.TEXT, frame)

    def close(self) -> None:
        assert self.t is not None
        self.t.send_close()
        self.t.disconnect()

    def reply(self, payload: bytes) -> None:
        """One message from the host."""
        if self.waiting:
            self.waiting.popleft().set_result(payload)
            return
        d = self.driver
        now = time.perf_counter()
        sent = self.sent.popleft()
        if d.window_start <= now < d.window_end:
            d.latencies.append(now - sent)
            if _ERROR in payload:
                d.errors += 1
                if d.first_error is None:
                    d.first_error = payload[:300].decode(errors="replace")
        if d.running and self.make is not None:
            self.send_next()
        elif not self.sent:
            d.conn_done()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        for fut in self.waiting:
            if not fut.done():
                fut.set_exception(ConnectionError("disconnected"))
        self.waiting.clear()
        if self.sent:
            self.sent.clear()
            self.driver.conn_done()

    def send_next(self) -> None:
        assert self.t is not None and self.make is not None
        self.n += 1
        self.sent.append(time.perf_counter())
        self._write(self.make(self.n))

    async def call(self, frame: bytes) -> dict[str, Any]:
        """Send one frame and wait for its reply (set-up only, never during a run)."""
        assert self.t is not None
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self._write(frame)
        reply: dict[str, Any] = msgspec.json.decode(await fut)
        if reply.get("type") == "error":
            raise RuntimeError(f"set-up request failed: {reply}")
        return reply


class _Lines(asyncio.Protocol):
    """A socket whose bytes go to `feed` (the session's POSTs or its stream)."""

    def __init__(self, feed: Callable[[bytes], None], lost: Callable[[], None]) -> None:
        self.feed = feed
        self.lost = lost
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost()


class _HttpConn(_Conn):
    """One HTTP + SSE session with the same driving as a WebSocket connection."""

    def __init__(self, driver: Driver) -> None:
        super().__init__(driver)
        self.post: Any = None
        self.sid = b""
        self._answers: deque[asyncio.Future[bytes]] = deque()  # replies to set-up POSTs
        self._pbuf = b""
        self._sbuf = b""
        self._ebuf = b""  # the start of an event whose end is in a later chunk
        self._head = True

    async def open(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self.post, _ = await loop.create_connection(
            lambda: _Lines(self._post_data, self._gone), host, port)
        fut = loop.create_future()
        self._answers.append(fut)
        self.post.write(b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        self.sid = msgspec.json.decode(await fut)["session_id"].encode()
        stream, _ = await loop.create_connection(
            lambda: _Lines(self._stream_data, self._gone), host, port)
        stream.write(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                     b"X-Session-Id: " + self.sid + b"\r\n\r\n")
        self.t = stream  # a truthy transport, as the WebSocket's

    def _post_data(self, data: bytes) -> None:
        buf = self._pbuf + data
        while True:  # whole responses: head, then Content-Length bytes
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end].lower()
            i = head.find(b"content-length:")
            n = int(head[i + 15:].split(b"\r\n", 1)[0]) if i >= 0 else 0
            if len(buf) < end + 4 + n:
                break
            body, buf = buf[end + 4:end + 4 + n], buf[end + 4 + n:]
            if self._answers:
                self._answers.popleft().set_result(body)
            elif not head.startswith(b"http/1.1 2"):
                d = self.driver
                d.errors += 1
                if d.first_error is None:
                    d.first_error = (head + body)[:300].decode(errors="replace")
        self._pbuf = buf

    def _stream_data(self, data: bytes) -> None:
        buf = self._sbuf + data
        if self._head:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self._sbuf = buf
                return
            buf = buf[end + 4:]
            self._head = False
        while True:  # chunks of events "id: N\ndata: JSON\n\n" (or comments), any number a chunk
            end = buf.find(b"\r\n")
            if end < 0:
                break
            size = int(buf[:end], 16)
            if len(buf) < end + 2 + size + 2:
                break
            chunk, buf = buf[end + 2:end + 2 + size], buf[end + 4 + size:]
            events = (self._ebuf + chunk).split(b"\n\n")
            self._ebuf = events.pop()  # an event the next chunk ends
            for event in events:
                i = event.find(b"data: ")
                if i >= 0:
                    self.reply(event[i + 6:].split(b"\n", 1)[0])
        self._sbuf = buf

    def _gone(self) -> None:
        self.on_ws_disconnected(None)  # type: ignore[arg-type]

    def _write(self, frame: bytes) -> None:
        self.post.write(b"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
                        b"X-Session-Id: " + self.sid + b"\r\nContent-Length: "
                        + str(len(frame)).encode() + b"\r\n\r\n" + frame)

    def close(self) -> None:
        self.post.write(b"DELETE /session HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Session-Id: " + self.sid
                        + b"\r\nContent-Length: 0\r\n\r\n")
        self.t.close()


class Driver:
    """Every connection of this process and the counters of the current run."""

    def __init__(self) -> None:
        self.conns: list[_Conn] = []
        self.first = 0
        self.running = False
        self.window_start = self.window_end = 0.0
        self.latencies: array[float] = array("d")
        self.errors = 0
        self.first_error: str | None = None
        self._busy = 0
        self._all_done: asyncio.Event | None = None

    async def connect(self, url: str, first: int, count: int) -> None:
        """Open `count` connections, at most 64 handshakes at a time."""
        self.first = first
        gate = asyncio.Semaphore(64)

        async def one() -> _Conn:
            async with gate:
                if url.startswith("http://"):
                    hc = _HttpConn(self)
                    host, _, port = url[7:].rstrip("/").partition(":")
                    await hc.open(host, int(port))
                    return hc
                _, conn = await ws_connect(lambda: _Conn(self), url,
                                           websocket_handshake_timeout=60,
                                           max_frame_size=64 * 1024 * 1024)
                assert isinstance(conn, _Conn)
                return conn

        self.conns += await asyncio.gather(*(one() for _ in range(count)))

    async def init(self, namespace: str, agents: int) -> None:
        """Open a session in `namespace` on every connection, as agent a<c % agents>."""
        async def one(i: int, conn: _Conn) -> None:
            c = self.first + i
            reply = await conn.call(json.dumps({
                "type": "memory/init/req", "version": "1.0", "id": f"init{c}",
                "namespace": namespace, "scope": {"agent": f"a{c % agents}"}}).encode())
            conn.sessions[namespace] = reply["memory_id"]

        await asyncio.gather(*(one(i, c) for i, c in enumerate(self.conns)))

    async def preload(self, namespace: str, per_agent: int) -> None:
        """Each connection (one agent each) stores `per_agent` entries keyed {"a", "p"}; one in
        ten is semantic, so reads see both persistent tiers."""
        async def one(i: int, conn: _Conn) -> None:
            a = self.first + i
            mid = conn.sessions[namespace]
            for start in range(0, per_agent, _PRELOAD_BATCH):
                entries = [
                    {"key": {"a": a, "p": p}, "content": {"text": sentence(a * 100_000 + p)},
                     "tier": "semantic" if p % 10 == 9 else "episodic",
                     "tags": ["bench", f"t{p % 10}"], "source": "preload", "score": (p % 5) / 4}
                    for p in range(start, min(per_agent, start + _PRELOAD_BATCH))
                ]
                await conn.call(json.dumps({
                    "type": "memory/store/req", "version": "1.0", "id": f"pre{a}-{start}",
                    "memory_id": mid, "entries": entries}).encode())

        await asyncio.gather(*(one(i, c) for i, c in enumerate(self.conns)))

    def conn_done(self) -> None:
        self._busy -= 1
        if self._busy <= 0 and self._all_done is not None:
            self._all_done.set()

    async def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Start at `start` (CLOCK_MONOTONIC seconds, shared by every process), count replies
        that arrive in [start + warmup, start + warmup + duration), stop sending at the end and
        wait for the replies still in flight."""
        ns = cmd["namespace"]
        for i, conn in enumerate(self.conns):
            c = self.first + i
            conn.make = frame_maker(cmd["case"], conn.sessions.get(ns, _NO_SESSION), c,
                                    c % cmd.get("agents", 100), cmd.get("keys", 100))
            conn.n = 0
        self.latencies = array("d")
        self.errors = 0
        self.first_error = None
        # time.monotonic and perf_counter are the same clock on Linux (CLOCK_MONOTONIC)
        offset = time.perf_counter() - time.monotonic()
        start = cmd["start"] + offset
        self.window_start = start + cmd["warmup"]
        self.window_end = self.window_start + cmd["duration"]
        await asyncio.sleep(max(0.0, start - time.perf_counter()))
        self.running = True
        self._busy = len(self.conns)
        self._all_done = asyncio.Event()
        for conn in self.conns:
            for _ in range(cmd["depth"]):
                conn.send_next()
        await asyncio.sleep(max(0.0, self.window_start - time.perf_counter()))
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.sleep(max(0.0, self.window_end - time.perf_counter()))
        self.running = False
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        try:
            await asyncio.wait_for(self._all_done.wait(), cmd.get("drain", 120))
        except TimeoutError:
            pass
        lat = array("f", self.latencies)
        cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
        return {"count": len(lat), "errors": self.errors,
                "pending": sum(len(conn.sent) for conn in self.conns), "first_error": self.first_error,
                "client_cpu": cpu, "latencies": base64.b64encode(lat.tobytes()).decode()}

    async def close(self) -> None:
        """Close every connection."""
        for conn in self.conns:
            if conn.t is not None:
                conn.close()
        await asyncio.sleep(0.1)


def _rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    d = Driver()
    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)
        out: dict[str, Any] = {"ok": True}
        try:
            match cmd["cmd"]:
                case "connect":
                    await d.connect(cmd["url"], cmd["first"], cmd["count"])
                case "init":
                    await d.init(cmd["namespace"], cmd["agents"])
                case "preload":
                    await d.preload(cmd["namespace"], cmd["per_agent"])
                case "run":
                    out.update(await d.run(cmd))
                case "rss":
                    out["rss_kib"] = _rss_kib()
                case "close":
                    await d.close()
                    print(json.dumps(out), flush=True)
                    return
        except Exception as exc:  # reported to the orchestrator, which stops the run
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)


def main() -> None:
    """Serve commands from stdin until `close` or end of input."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve())
    else:
        uvloop.run(_serve())


if __name__ == "__main__":
    main()
