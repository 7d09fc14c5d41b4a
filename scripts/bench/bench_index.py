"""Micro-benchmark of the vector indexes (host.search.index), in process, no host.

Clustered synthetic unit vectors (1,000 gaussian centres, noise): each index kind is built in a
child process of its own (so its RSS is its own), the rows streamed in chunks while the exact
top 10 of every query is kept for each filter (so no copy of the rows is held beside the
index). Prints, for each kind: build time, `nbytes`, RSS growth, and for each filter the p50 /
p99 of a query and recall@10 against exact float32 search. The baseline is the exact float32
index (today's), measured in the same run.

Filters: none; groups allowing 1 % of the rows; groups allowing 30 %; `only` ids, 1 %.

    .venv/bin/python scripts/bench/bench_index.py --n 100000
    .venv/bin/python scripts/bench/bench_index.py --n 1000000 --kinds exact32,ann
    .venv/bin/python scripts/bench/bench_index.py --n 100000 --libs   # the ANN libraries compared raw
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DIM, CENTRES, NOISE, CHUNK = 384, 1000, 0.06, 50_000
FILTERS = ("none", "groups 1%", "groups 30%", "only 1%")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def centres() -> np.ndarray:
    c = np.random.default_rng(0).standard_normal((CENTRES, DIM)).astype(np.float32)
    return c / np.linalg.norm(c, axis=1, keepdims=True)


def sample(c: np.ndarray, n: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    v = c[r.integers(0, CENTRES, n)] + NOISE * r.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def group(ids: np.ndarray) -> list[str]:
    """1 % "one", 30 % "thirty" (minus the 1 %), the rest "rest"."""
    return np.where(ids % 100 == 0, "one", np.where(ids % 10 < 3, "thirty", "rest")).tolist()


def allowed_by(name: str, ids: np.ndarray) -> np.ndarray:
    if name == "none":
        return np.ones(ids.size, dtype=bool)
    if name == "groups 1%":
        return ids % 100 == 0
    if name == "groups 30%":
        return (ids % 100 == 0) | (ids % 10 < 3)
    return ids % 100 == 7


def search_args(name: str, n: int) -> dict[str, Any]:
    if name == "groups 1%":
        return {"groups": ["one"]}
    if name == "groups 30%":
        return {"groups": ["one", "thirty"]}
    if name == "only 1%":
        return {"only": np.arange(7, n, 100, dtype=np.int64)}
    return {}


def stream(n: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    c = centres()
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        yield np.arange(start, start + m, dtype=np.int64), sample(c, m, start + 1)


class Truth:
    """The exact top 10 of each query under each filter, kept over streamed chunks."""

    def __init__(self, queries: np.ndarray) -> None:
        self.q = queries
        self.ids = {f: np.zeros((len(queries), 0), dtype=np.int64) for f in FILTERS}
        self.sims = {f: np.zeros((len(queries), 0), dtype=np.float32) for f in FILTERS}

    def update(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        sims = self.q @ vecs.T
        for f in FILTERS:
            keep = allowed_by(f, ids)
            s = np.concatenate([self.sims[f], sims[:, keep]], axis=1)
            i = np.concatenate([self.ids[f], np.broadcast_to(ids[keep], (len(self.q), int(keep.sum())))], axis=1)
            top = np.argsort(-s, axis=1, kind="stable")[:, :10]
            self.sims[f] = np.take_along_axis(s, top, 1)
            self.ids[f] = np.take_along_axis(i, top, 1)


def run_kind(kind: str, n: int, nq: int, opts: dict[str, Any], keep: str = "") -> dict[str, Any]:
    from host.search.index import ExactIndex
    from host.search.index.ann import AnnIndex
    from host.search.index.builds import build_ann
    from host.search.index.persist import stale_rows

    queries = sample(centres(), nq, 10**9)
    truth = Truth(queries)
    base = rss()
    t0 = time.perf_counter()
    index: Any
    kept = Path(keep) / f"ann-{n}" if keep else None
    if kind == "ann" and kept is not None and AnnIndex.exists(kept):  # built by an earlier run
        for ids, vecs in stream(n):
            truth.update(ids, vecs)
        base = rss()
        t0 = time.perf_counter()
        index = AnnIndex.load(kept, key="k", **opts)
    elif kind == "ann":
        def rows() -> Iterator[tuple[list[int], np.ndarray, list[str], list[float | None]]]:
            for ids, vecs in stream(n):
                truth.update(ids, vecs)
                yield ids.tolist(), vecs, group(ids), [None] * ids.size
        index = build_ann(DIM, rows(), **opts)
    else:
        index = ExactIndex(DIM, dtype="float16" if kind == "exact16" else "float32",
                           capacity=n)
        for ids, vecs in stream(n):
            truth.update(ids, vecs)
            index.add(ids.tolist(), vecs, group(ids), [None] * ids.size)
    build = time.perf_counter() - t0
    grown = rss() - base
    if kind == "ann" and kept is not None and not AnnIndex.exists(kept):
        kept.parent.mkdir(parents=True, exist_ok=True)
        index.save(kept, key="k")
    out: dict[str, Any] = {"kind": kind, "n": n, "build_s": round(build, 1),
                           "nbytes_mb": round(index.nbytes / 1e6, 1),
                           "rss_mb": round(grown / 1e6, 1), "filters": {}}
    for f in FILTERS:
        kw = search_args(f, n)
        lat, hit = [], 0
        for j, q in enumerate(queries):
            t = time.perf_counter()
            got = index.search(q, 10, **kw)
            lat.append(time.perf_counter() - t)
            hit += len(set(got.ids.tolist()) & set(truth.ids[f][j].tolist()))
        ms = np.array(lat) * 1e3
        out["filters"][f] = {"p50_ms": round(float(np.percentile(ms, 50)), 2),
                             "p99_ms": round(float(np.percentile(ms, 99)), 2),
                             "recall": round(hit / (10 * nq), 3)}
    if kind == "ann":  # a restart: save, load back, bring up to date against the rows
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            index.save(Path(tmp) / "k", key="k")
            out["save_s"] = round(time.perf_counter() - t, 2)
            del index
            t = time.perf_counter()
            index = AnnIndex.load(Path(tmp) / "k", key="k", **opts)
            out["load_s"] = round(time.perf_counter() - t, 2)
        spent = 0.0
        for ids, vecs in stream(n):
            t = time.perf_counter()
            late = stale_rows(index, ids.tolist(), vecs, group(ids), [None] * ids.size)
            if late is not None:
                index.add(*late)
                index.changed = True
            spent += time.perf_counter() - t
        out["sync_s"] = round(spent, 2)
        out["sync_changed"] = index.changed
        out["sync_garbage"] = index.garbage
    return out


def run_lib(lib: str, n: int, nq: int) -> dict[str, Any]:
    """One ANN library raw (no filters), HNSW M=16, efConstruction=128, at three ef."""
    queries = sample(centres(), nq, 10**9)
    truth = Truth(queries)
    base = rss()
    t0 = time.perf_counter()
    chunks = list(stream(n))
    for ids, vecs in chunks:
        truth.update(ids, vecs)
    base = rss()
    t0 = time.perf_counter()
    if lib.startswith("usearch"):
        from usearch.index import Index
        ix = Index(ndim=DIM, metric="cos", dtype=lib.split("-")[1], connectivity=16,
                   expansion_add=128)
        for ids, vecs in chunks:
            ix.add(ids.astype(np.uint64), vecs, threads=0)

        def search(q: np.ndarray, ef: int) -> np.ndarray:
            ix.expansion_search = ef
            return np.asarray(ix.search(q, 10).keys)
    elif lib == "hnswlib":
        import hnswlib
        ix = hnswlib.Index(space="ip", dim=DIM)
        ix.init_index(max_elements=n, ef_construction=128, M=16)
        for ids, vecs in chunks:
            ix.add_items(vecs, ids)

        def search(q: np.ndarray, ef: int) -> np.ndarray:
            ix.set_ef(ef)
            return np.asarray(ix.knn_query(q, 10)[0][0])
    else:
        import faiss
        qt = {"faiss-sq8": faiss.ScalarQuantizer.QT_8bit, "faiss-fp16": faiss.ScalarQuantizer.QT_fp16}[lib]
        ix = faiss.IndexHNSWSQ(DIM, qt, 16, faiss.METRIC_INNER_PRODUCT)
        ix.hnsw.efConstruction = 128
        ix.train(chunks[0][1][:20_000])
        for _, vecs in chunks:
            ix.add(vecs)

        def search(q: np.ndarray, ef: int) -> np.ndarray:
            params = faiss.SearchParametersHNSW(efSearch=ef)
            return np.asarray(ix.search(q[None, :], 10, params=params)[1][0])
    build = time.perf_counter() - t0
    grown = rss() - base
    del chunks
    out: dict[str, Any] = {"kind": lib, "n": n, "build_s": round(build, 1),
                           "rss_mb": round(grown / 1e6, 1), "filters": {}}
    for ef in (32, 64, 128):
        lat, hit = [], 0
        for j, q in enumerate(queries):
            t = time.perf_counter()
            got = search(q, ef)
            lat.append(time.perf_counter() - t)
            hit += len(set(got.tolist()) & set(truth.ids["none"][j].tolist()))
        ms = np.array(lat) * 1e3
        out["filters"][f"ef={ef}"] = {"p50_ms": round(float(np.percentile(ms, 50)), 2),
                                      "p99_ms": round(float(np.percentile(ms, 99)), 2),
                                      "recall": round(hit / (10 * nq), 3)}
    return out


def show(r: dict[str, Any]) -> None:
    head = f"{r['kind']:>10} n={r['n']:,} build {r['build_s']} s"
    if "nbytes_mb" in r:
        head += f", nbytes {r['nbytes_mb']} MB"
    print(f"{head}, RSS +{r['rss_mb']} MB", flush=True)
    if "save_s" in r:
        print(f"{'':>12}restart: save {r['save_s']} s, load {r['load_s']} s, check against "
              f"the rows {r['sync_s']} s (changed: {r['sync_changed']}, holes {r['sync_garbage']})", flush=True)
    for f, m in r["filters"].items():
        print(f"{'':>12}{f:<12} p50 {m['p50_ms']:>6} ms  p99 {m['p99_ms']:>6} ms  "
              f"recall@10 {m['recall']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--kinds", default="exact32,exact16,ann",
                    help="comma-separated: exact32 (the baseline), exact16, ann")
    ap.add_argument("--libs", action="store_true",
                    help="compare the ANN libraries raw instead (usearch-i8, usearch-f16, "
                         "faiss-sq8, faiss-fp16, hnswlib: those installed)")
    ap.add_argument("--ann", default="{}", help="AnnIndex options as JSON, e.g. '{\"ef_search\": 96}'")
    ap.add_argument("--keep", default="",
                    help="a folder: the AnnIndex is saved there once built and loaded from it by "
                         "later runs (the build time is then the load's)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        r = (run_lib(a.child[4:], a.n, a.queries) if a.child.startswith("lib:")
             else run_kind(a.child, a.n, a.queries, json.loads(a.ann), a.keep))
        print(json.dumps(r))
        return
    kinds = (["lib:usearch-i8", "lib:usearch-f16", "lib:faiss-sq8", "lib:faiss-fp16", "lib:hnswlib"]
             if a.libs else a.kinds.split(","))
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}; {a.n:,} x {DIM} clustered unit vectors, "
              f"{a.queries} queries, k=10; OPENBLAS_NUM_THREADS="
              f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}", flush=True)
    for kind in kinds:
        p = subprocess.run([sys.executable, __file__, "--n", str(a.n), "--queries", str(a.queries),
                            "--ann", a.ann, "--keep", a.keep, "--child", kind], capture_output=True, text=True)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{kind}: failed ({last})", flush=True)
            continue
        show(json.loads(p.stdout.strip().splitlines()[-1]))
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]} at the end", flush=True)


if __name__ == "__main__":
    main()
