"""Rows for the tests of the vector index package (`host.search.index`) without a store:
unit vectors, the groups of two agents' episodic rows and the shared semantic ones, and
`Store`, rows per key with the chunked loader `VectorIndexes` reads them through."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np

from host.search.index import group_of

__all__ = ["ALICE", "BOB", "DIM", "SHARED", "Store", "unit"]

DIM = 32
ALICE, BOB, SHARED = group_of("episodic", "alice"), group_of("episodic", "bob"), group_of("semantic", "")


def unit(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class Store:
    """Rows per key, as a store holds them; `loader` yields them in chunks (optionally waiting
    on `gate` after the first chunk, so a test can write while a load is in progress)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, tuple[np.ndarray, str, float | None]]] = {}
        self.reads: list[str] = []
        self.gate: threading.Event | None = None
        self.started = threading.Event()

    def put(self, key: str, ids: list[int], vecs: np.ndarray, groups: list[str]) -> None:
        rows = self.rows.setdefault(key, {})
        for i, v, g in zip(ids, vecs, groups, strict=True):
            rows[i] = (v, g, None)

    def loader(self, key: str) -> Iterator[tuple[list[int], np.ndarray, list[str], list[float | None]]]:
        self.reads.append(key)
        items = sorted(self.rows.get(key, {}).items())
        for start in range(0, len(items), 100):
            part = items[start: start + 100]
            yield ([i for i, _ in part], np.stack([r[0] for _, r in part]),
                   [r[1] for _, r in part], [r[2] for _, r in part])
            if start == 0 and self.gate is not None:
                self.started.set()
                self.gate.wait()
