#!/usr/bin/env python3
"""Try retrieval settings quickly: LoCoMo through an in-process host, embeddings cached.

The same requests as `scripts/bench/bench_retrieval.py` (each turn one episodic entry, each question
of categories 1-4 one `memory/retrieve` with `query`, over a WebSocket to a host on a free
port), but the host runs in this process and its embedder keeps every vector it computed in a
cache file, so a second run with other settings costs seconds, not minutes. Settings are config
overrides; several `--try` runs are compared in one go:

    python scripts/bench/tune_retrieval.py --data DIR --conv 26 30                    # defaults
    python scripts/bench/tune_retrieval.py --data DIR --conv 26 30 --try search.vector_weight=1.5 \
        --try search.vector_weight=0.7 search.keyword_weight=1

Tune on 26 and 30 only; report the held-out conversations (41 42 43) once, with the figures of
`scripts/bench/bench_retrieval.py` (a real `a2e-host serve` process). The cache (`--cache`, in the
system's temporary folder by default) holds vectors by text and embedder name; delete it to
recompute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from host.app import Host  # noqa: E402
from host.client import MemoryClient  # noqa: E402
from host.config import load_config  # noqa: E402
from scripts.bench.bench_retrieval import CATEGORIES, add_data_arg, ask, load  # noqa: E402


class CachedEmbedder:
    """Wraps an embedder: vectors by (query or not, text), kept in a .npz file."""

    def __init__(self, inner: Any, path: Path) -> None:
        self.inner, self.path = inner, path
        self.name, self.dim = inner.name, inner.dim
        self.cache: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path, allow_pickle=False) as z:
                self.cache = dict(zip(z["keys"].tolist(), z["vecs"], strict=True))
        self.dirty = False

    def _get(self, texts: list[str], query: bool) -> np.ndarray:
        tag = ("q|" if query else "d|") + self.name + "|"
        missing = [t for t in dict.fromkeys(texts) if tag + t not in self.cache]
        if missing:
            fn = self.inner.embed_queries if query else self.inner.embed
            for t, v in zip(missing, fn(missing), strict=True):
                self.cache[tag + t] = v
            self.dirty = True
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.cache[tag + t] for t in texts]).astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._get(list(texts), False)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._get(list(texts), True)

    def save(self) -> None:
        if self.dirty:
            keys = list(self.cache)
            np.savez(self.path, keys=np.array(keys), vecs=np.stack([self.cache[k] for k in keys]))
            self.dirty = False


def overrides(pairs: list[str], db: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"server": {"port": 0}, "store": {"db": db}}
    for p in pairs:
        name, _, value = p.partition("=")
        section, _, field = name.partition(".")
        v: Any = value
        if value.startswith("["):  # a list, as JSON: search.calibration=[-8.4,24.3,...]
            out.setdefault(section, {})[field] = json.loads(value)
            continue
        for cast in (int, float):
            try:
                v = cast(value)
                break
            except ValueError:
                pass
        out.setdefault(section, {})[field] = v
    return out


@asynccontextmanager
async def cached_host(cfg: Any, cache: Path) -> AsyncIterator[tuple[Host, CachedEmbedder | None]]:
    """A started in-process Host whose embedder reads and fills the vector cache `cache`;
    on exit the host stops and the cache is saved."""
    host = Host(cfg)
    emb = None
    if host.search.embedder is not None:
        emb = CachedEmbedder(host.search.embedder, cache)
        host.search.use_embedder(emb)  # type: ignore[arg-type]
    await host.start()
    try:
        yield host, emb
    finally:
        await host.stop()
        if emb is not None:
            emb.save()


async def stored_conversation(host: Host, ns: str, turns: list[tuple[Any, str]]) -> MemoryClient:
    """A client of `host` in namespace `ns` (agent "bench") that has stored every turn as an
    episodic entry keyed by its dialogue id, 100 a request."""
    c = await MemoryClient.connect(f"ws://127.0.0.1:{host.port}")
    await c.init(ns, {"agent": "bench"})
    entries = [{"key": {"turn": d}, "content": t, "tier": "episodic"} for d, t in turns]
    for i in range(0, len(entries), 100):
        await c.store(entries[i:i + 100])
    return c


async def one(settings: list[str], convs: dict[str, Any], cache: Path) -> dict[str, Any]:
    rows: list[tuple[int, float, float]] = []
    lat: list[float] = []
    with tempfile.TemporaryDirectory(prefix="a2e-tune-") as tmp:
        cfg = load_config(None, overrides(settings, f"{tmp}/t.db"))
        async with cached_host(cfg, cache) as (host, _emb):
            for name, (turns, qs) in convs.items():
                c = await stored_conversation(host, f"locomo-{name}", turns)
                await host.search.drain()
                await ask(c, qs, lat, rows)
                await c.close()
    res = {"r5": statistics.fmean(r[1] for r in rows), "r10": statistics.fmean(r[2] for r in rows),
           "p50": float(np.percentile(lat, 50))}
    for c, label in CATEGORIES.items():
        sel = [r[2] for r in rows if r[0] == c]
        res[label] = statistics.fmean(sel) if sel else float("nan")
    return res


async def run(args: argparse.Namespace) -> None:
    convs = {c: load(args.data, c) for c in args.conv}
    print(f"conversations {' '.join(args.conv)}")
    print("| settings | R@5 | R@10 | " + " | ".join(CATEGORIES.values()) + " | p50 ms |")
    for settings in args.tries or [[]]:
        r = await one(settings, convs, args.cache)
        print(f"| {' '.join(settings) or 'defaults'} | {r['r5']:.3f} | {r['r10']:.3f} | "
              + " | ".join(f"{r[label]:.3f}" for label in CATEGORIES.values())
              + f" | {r['p50']:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conv", nargs="+", default=["26", "30"])
    add_data_arg(ap)
    ap.add_argument("--try", dest="tries", nargs="+", action="append", default=[],
                    metavar="SECTION.FIELD=VALUE", help="one run's config overrides")
    ap.add_argument("--cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "a2e-tune-embeddings.npz")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
