"""Fuzz a host with mutated frames over a real socket, bounded in frames and time.

    python scripts/fuzz/fuzz_host.py                       # 100,000 frames, at most 300 s
    python scripts/fuzz/fuzz_host.py --frames 20000 --seconds 60 --seed 7

Starts its own `a2e-host serve` subprocess on a free loopback port (small frames, no rate
limit, a temporary database), then sends frames made by mutating valid requests (fields
dropped, retyped or added; text truncated, bytes flipped; deep nesting; binary frames; text that
is not UTF-8; oversized frames), pipelined in batches. Each frame must get one well-formed reply
in order (never `internal_error`), or — for the last two kinds — the documented close (1007,
1009). After every batch a second connection must answer a ping. Prints the counts; exits 1 on
any failure, or if the host died.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))  # tests/support
from support.procs import HostProcess  # noqa: E402

MAX_FRAME = 4096
CLOSERS = {"bad_utf8": 1007, "big": 1009}
RETRYABLE = {"rate_limited", "internal_error"}


def templates(memory_id: str) -> list[dict[str, Any]]:
    """One valid request of each type."""
    entry = {"key": {"k": 1, "s": "x"}, "content": {"text": "hello world"}, "tier": "episodic",
             "tags": ["t"], "score": 0.5, "ttl": 0, "source": "fuzz"}
    base = {"version": "1.0", "id": "r", "ts": 1.0}
    return [
        {**base, "type": "memory/init/req", "namespace": "fuzz", "scope": {"agent": "f"}},
        {**base, "type": "memory/store/req", "memory_id": memory_id,
         "entries": [entry, {**entry, "tier": "working"}, {**entry, "tier": "semantic"}]},
        {**base, "type": "memory/retrieve/req", "memory_id": memory_id, "keys": [{"k": 1}],
         "query": "hello", "tags": ["t"], "tier": "", "limit": 5, "min_score": 0.1},
        {**base, "type": "memory/forget/req", "memory_id": memory_id, "tags": ["t"],
         "tier": "working"},
        {**base, "type": "handshake/req", "agent_id": "f", "agent_caps": ["memory"],
         "auth_token": ""},
        {**base, "type": "ping"},
    ]


_NUMBER = re.compile(r'(": )-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?=[,}\]])')


class Mutator:
    """Seeded frame maker: returns (kind, frame, expected req_id or None when unknowable)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        choice = r.randrange(9 if depth < 3 else 6)
        if choice == 0:
            return None
        if choice == 1:
            return r.choice([True, False])
        if choice == 2:
            return r.choice([0, -1, 1, 2**63, -(2**64), 10**30, r.randrange(-1000, 1000),
                             10**400, -(10**400)])  # past a double: invalid_message
        if choice == 3:
            return r.choice([0.5, -0.0, 1e308, -1e-300, 2.0, r.random()])
        if choice == 4:
            return "".join(chr(r.choice([r.randrange(32, 127), r.randrange(0x80, 0x2FFF)]))
                           for _ in range(r.randrange(0, 12)))
        if choice == 5:
            return r.choice(["", "1.0", "working", "episodic", "semantic", "memory/init/req"])
        if choice in (6, 7):
            return [self.value(depth + 1) for _ in range(r.randrange(0, 4))]
        return {f"f{r.randrange(9)}": self.value(depth + 1)
                for _ in range(r.randrange(0, 4))}

    def mutate(self, msg: dict[str, Any]) -> dict[str, Any]:
        r = self.rng
        msg = json.loads(json.dumps(msg))
        for _ in range(r.randrange(1, 4)):
            op = r.randrange(6)
            fields = list(msg)
            if op == 0 and fields:
                del msg[r.choice(fields)]
            elif op == 1 and fields:
                msg[r.choice(fields)] = self.value()
            elif op == 2:
                msg[f"extra{r.randrange(5)}"] = self.value()
            elif op == 3 and isinstance(msg.get("entries"), list) and msg["entries"]:
                e = r.choice(msg["entries"])
                if isinstance(e, dict) and e:
                    e[r.choice(list(e))] = self.value()
            elif op == 4:
                msg["id"] = self.value() if r.random() < 0.3 else f"m{r.randrange(10**6)}"
            else:
                msg["type"] = r.choice(["memory/init/resp", "error", "pong", "bogus",
                                        "memory/store/req", "ping", "handshake/req"])
        return msg

    def frame(self, memory_id: str) -> tuple[str, str | bytes, str | None]:
        r = self.rng
        roll = r.random()
        if roll < 0.004:
            return "bad_utf8", b"{\"a\": \"\xff\xfe\"}", None
        if roll < 0.008:
            return "big", json.dumps({"type": "ping", "version": "1.0",
                                      "pad": "x" * (MAX_FRAME + r.randrange(1, 4000))}), None
        if roll < 0.05:
            return "binary", r.randbytes(r.randrange(0, 64)), ""
        if roll < 0.08:  # deep nesting, alone or as a key, a content or a tag list
            depth = r.randrange(10, MAX_FRAME // 2 - 200)
            deep = "[" * depth + "]" * depth
            where = r.randrange(4)
            if where == 0:
                return "deep", deep, ""
            mid = json.dumps(memory_id)
            if where == 1:
                body = f'"entries": [{{"key": {{"a": {deep}}}, "content": 1, "tier": "working"}}]'
            elif where == 2:
                body = f'"entries": [{{"key": {{"a": 1}}, "content": {deep}, "tier": "episodic"}}]'
            else:
                body = f'"keys": [{{"a": {deep}}}]'
            kind = "memory/retrieve/req" if where == 3 else "memory/store/req"
            return "deep", (f'{{"type": "{kind}", "version": "1.0", "id": "d",'
                            f' "memory_id": {mid}, {body}}}'), None  # "" if too deep to parse
        msg = r.choice(templates(memory_id))
        if roll < 0.7:
            msg = self.mutate(msg)
        rid = msg.get("id")
        text = json.dumps(msg)
        if 0.85 < roll <= 0.9:  # a number JSON allows but a double cannot hold
            text = _NUMBER.sub(lambda m: m.group(1) + r.choice(["1e999", "-1e999", "9" * 400]),
                               text, count=1)
        if roll > 0.9 and len(text) > 2:  # damage the text itself
            i = r.randrange(len(text))
            text = text[:i] if r.random() < 0.5 else text[:i] + chr(r.randrange(32, 127)) + text[i:]
            return "damaged", text, None  # may or may not still parse
        return "json", text, rid if isinstance(rid, str) else ""


def start_host(folder: Path, transport: str = "websockets") -> tuple[subprocess.Popen[bytes], str]:
    """`a2e-host serve` on a free port with its log (errors only) in folder/host.log."""
    cfg = folder / "host.toml"
    cfg.write_text(f"[limits]\nmax_frame_bytes = {MAX_FRAME}\nrequests_per_second = 0\n")
    with (folder / "host.log").open("wb") as log:
        host = HostProcess(folder / "fuzz.db", "--config", str(cfg), transport=transport,
                           log_level="ERROR", stdout=subprocess.DEVNULL, stderr=log)
    return host.proc, host.url


class Fuzzer:
    """Drives connection A with frames and checks connection B stays served."""

    def __init__(self, url: str, seed: int) -> None:
        self.url = url
        self.mut = Mutator(seed)
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []
        self.ws: ClientConnection | None = None
        self.memory_id = ""

    async def session(self) -> ClientConnection:
        if self.ws is None:
            self.ws = await connect(self.url, compression=None, max_size=None)
            await self.ws.send(json.dumps({"type": "memory/init/req", "id": "i", "version": "1.0",
                                           "namespace": "fuzz", "scope": {"agent": "f"}}))
            self.memory_id = json.loads(await self.ws.recv())["memory_id"]
        return self.ws

    def check(self, kind: str, raw: str | bytes, rid: str | None) -> None:
        try:
            reply = json.loads(raw)
            rtype = reply["type"]
            self.counts[f"reply {rtype}" + (f" {reply['code']}" if rtype == "error" else "")] += 1
            assert reply["version"] == "1.0", "version"
            if rtype == "error":
                assert reply["code"] != "internal_error", "internal_error"
                assert reply["retryable"] == (reply["code"] in RETRYABLE), "retryable"
            if rid is not None:
                assert reply.get("req_id") == rid, f"req_id {reply.get('req_id')!r} != {rid!r}"
        except (AssertionError, KeyError, ValueError, TypeError) as err:
            self.failures.append(f"{kind}: {err}: {str(raw)[:200]}")

    async def batch(self, size: int) -> int:
        ws = await self.session()
        sent: list[tuple[str, str | None]] = []
        closing: str | None = None
        for _ in range(size):
            kind, data, rid = self.mut.frame(self.memory_id)
            await ws.send(data, text=True if kind == "bad_utf8" else None)
            self.counts[f"sent {kind}"] += 1
            if kind in CLOSERS:
                closing = kind
                break
            sent.append((kind, rid))
        try:
            for kind, rid in sent:
                self.check(kind, await asyncio.wait_for(ws.recv(), 30), rid)
            if closing is not None:
                await asyncio.wait_for(ws.recv(), 30)
                self.failures.append(f"{closing}: a reply instead of the close")
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            if closing is None or code != CLOSERS[closing]:
                self.failures.append(f"unexpected close {code} (after {closing})")
            self.counts[f"close {code}"] += 1
            self.ws = None
        except TimeoutError:
            self.failures.append("no reply within 30 s")
            self.ws = None
        return len(sent) + (closing is not None)


async def run(url: str, frames: int, seconds: float, seed: int, batch: int) -> tuple[Fuzzer, float]:
    fz = Fuzzer(url, seed)
    other = await connect(url, compression=None)
    start = time.monotonic()
    done = 0
    while done < frames and time.monotonic() - start < seconds and len(fz.failures) < 20:
        done += await fz.batch(min(batch, frames - done))
        t = time.monotonic()
        await other.send(json.dumps({"type": "ping", "id": "p", "version": "1.0"}))
        if json.loads(await asyncio.wait_for(other.recv(), 30))["type"] != "pong":
            fz.failures.append("second connection: no pong")
        fz.counts["second connection pings"] += 1
        fz.counts["second connection max ping ms"] = max(
            fz.counts["second connection max ping ms"], int((time.monotonic() - t) * 1000))
    await other.close()
    if fz.ws is not None:
        await fz.ws.close()
    return fz, time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=300.0, help="stop after this long")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=100, help="frames pipelined before reading")
    ap.add_argument("--transport", choices=("websockets", "picows"), default="websockets",
                    help="the host's server.transport")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_host(Path(tmp), args.transport)
        try:
            fz, elapsed = asyncio.run(run(url, args.frames, args.seconds, args.seed, args.batch))
            alive = proc.poll() is None
        finally:
            proc.terminate()
            proc.wait(30)
        log = (Path(tmp) / "host.log").read_text(errors="replace")
    sent = sum(v for k, v in fz.counts.items() if k.startswith("sent "))
    print(f"frames sent: {sent} in {elapsed:.1f} s ({sent / elapsed:,.0f}/s), seed {args.seed}")
    for key in sorted(fz.counts):
        print(f"  {key}: {fz.counts[key]}")
    print(f"host alive at the end: {alive}")
    print(f"failures: {len(fz.failures)}")
    for f in fz.failures[:20]:
        print(f"  {f}")
    if fz.failures and log:
        print("host log (last lines):\n" + "\n".join(log.splitlines()[-40:]))
    return 0 if alive and not fz.failures else 1


if __name__ == "__main__":
    sys.exit(main())
