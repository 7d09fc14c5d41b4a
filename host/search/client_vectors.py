"""Search by client-supplied vectors (the store extension): cosine similarity, nothing else.

Apart from the host's own ranking (engine.py, fusion, rank): a retrieve with `vector` asks
for the entries nearest to a vector the client computed in its own space, and its relevance
is their cosine similarity, as LangGraph's stores report it. An entry with several vectors
(one a field it embedded) scores its best one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MAX_DIMS", "nearest", "unit_rows"]

MAX_DIMS = 4096  # the largest dimension a space may have


def unit_rows(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    """`vectors` as float32 rows of unit length (a zero row stays zero). Raises ValueError for
    rows of different lengths, an empty row, more than `MAX_DIMS` values or a value that is not
    finite (in float32 too)."""
    dims = {len(v) for v in vectors}
    if len(dims) != 1:
        raise ValueError("every vector of an entry has the same dimension")
    d = dims.pop()
    if not 1 <= d <= MAX_DIMS:
        raise ValueError(f"a vector has 1 to {MAX_DIMS} values, not {d}")
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.asarray(vectors, dtype=np.float64)
        if not np.isfinite(m).all() or not np.isfinite(m.astype(np.float32)).all():
            raise ValueError("vector values are finite numbers")
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        m = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return m.astype(np.float32)


def nearest(query: np.ndarray, rows: Sequence[tuple[int, np.ndarray]], min_score: float
            ) -> list[tuple[float, int]]:
    """(similarity, id) of every entry of `rows` whose best cosine similarity to the unit
    `query` is at least `min_score` (0: every one, negative similarities included), best
    first (ties: the higher id, the newer, first)."""
    if not rows:
        return []
    scores = [(float(np.max(m @ query)), i) for i, m in rows]
    if min_score > 0:
        scores = [s for s in scores if s[0] >= min_score]
    return sorted(scores, reverse=True)
