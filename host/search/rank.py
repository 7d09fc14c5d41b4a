"""The one ranking formula: relevance, importance and recency combined.

    combined = (w_rel * relevance + w_imp * importance + w_rec * recency) / (w_rel + w_imp + w_rec)
    recency  = 0.5 ** (age_seconds / half_life)          (1.0 for an entry updated now)

`relevance` is the query match in [0, 1] (see `host.search`), `importance` the entry's stored
`score` in [0, 1], or with `ranking.importance_half_life` set its score faded by the time since
it was last written or read (`faded`: halving every half-life; the `score` a reply carries stays
what the agent set). The weights and the half-life come from `RankingConfig`; the result stays in
[0, 1]. Every path that ranks (the host, the library, the MCP tools) calls `combined_score`;
a query's matches are ranked by `rank_matches`, and `score_parts` lays one match's figures out
for a person (the memory browser's Search page).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from host.config import RankingConfig

__all__ = ["Match", "RankWeights", "ScoreParts", "combined_score", "faded", "rank_matches",
           "recency", "score_parts"]


@dataclass(frozen=True, slots=True)
class RankWeights:
    """Weights of the combined score; see the module docstring."""

    relevance: float = 0.7
    importance: float = 0.2
    recency: float = 0.1
    half_life: float = 7 * 24 * 3600.0
    importance_half_life: float = 0.0  # 0: importance does not fade (see `faded`)

    @classmethod
    def from_config(cls, cfg: RankingConfig) -> RankWeights:
        """Build from the `[ranking]` section."""
        return cls(
            relevance=cfg.relevance_weight,
            importance=cfg.importance_weight,
            recency=cfg.recency_weight,
            half_life=cfg.recency_half_life,
            importance_half_life=cfg.importance_half_life,
        )


def recency(updated_at: float, now: float, half_life: float) -> float:
    """Recency in (0, 1]: 1.0 when `updated_at` is `now`, halving every `half_life` seconds."""
    age = now - updated_at
    if age <= 0:
        return 1.0
    return float(0.5 ** (age / half_life))


def faded(importance: float, last_used: float, now: float, half_life: float) -> float:
    """`importance` halved every `half_life` seconds since `last_used` (the later of the entry's
    last write and last read); unchanged with `half_life` 0 (fading off)."""
    if half_life <= 0:
        return importance
    return importance * recency(last_used, now, half_life)


def combined_score(
    relevance: float, importance: float, updated_at: float, now: float, w: RankWeights
) -> float:
    """The combined score in [0, 1] of one match; higher ranks first."""
    total = w.relevance + w.importance + w.recency
    if total <= 0:
        return relevance
    r = recency(updated_at, now, w.half_life)
    return (w.relevance * relevance + w.importance * importance + w.recency * r) / total


class Match(Protocol):
    """What ranking reads of a query's candidate (`host.store.records.StoredEntry` has it)."""

    @property
    def relevance(self) -> float | None: ...
    @property
    def score(self) -> float: ...
    @property
    def updated_at(self) -> float: ...


M = TypeVar("M", bound=Match)


def _ranking(e: Match) -> float:
    fused = getattr(e, "fused", None)
    return float(e.relevance if fused is None else fused)  # type: ignore[arg-type]


def _importance(e: Match, now: float, w: RankWeights, last_read: Mapping[int, float] | None
                ) -> float:
    """The importance term of one match: its score, faded since its last write or read."""
    read = last_read.get(getattr(e, "id", None) or 0, 0.0) if last_read else 0.0
    return faded(e.score, max(e.updated_at, read), now, w.importance_half_life)


def rank_matches(
    candidates: Iterable[M], min_score: float, now: float, w: RankWeights,
    last_read: Mapping[int, float] | None = None,
) -> list[tuple[float, M]]:
    """The candidates that match (relevance > 0 and >= `min_score`), each with its combined
    score, best first: the order of a `memory/retrieve` with a query. With
    `w.importance_half_life`, importance fades from the later of `updated_at` and the entry's
    last read (`last_read`, by row id)."""
    fades = w.importance_half_life > 0
    ranked = [
        # ordered on the search's order when it set one (`fused`: the pair's relevance and how
        # far the candidate stands out among the query's), filtered on the pair's `relevance`
        (combined_score(_ranking(e), _importance(e, now, w, last_read) if fades else e.score,
                        e.updated_at, now, w), e)
        for e in candidates
        if e.relevance is not None and e.relevance > 0 and e.relevance >= min_score
    ]
    ranked.sort(key=lambda p: -p[0])
    return ranked


@dataclass(frozen=True, slots=True)
class ScoreParts:
    """Why a match ranked where it did: `relevance` (of the pair query/entry alone: what the
    reply reports), `fused` (its order among the query's candidates, see `host.search.ranking`:
    the relevance term of `combined`, the same as `relevance` when the search set none), its
    inputs `keyword` (BM25, None when the store has none) and `vector` (cosine similarity,
    None without a vector yet), and the other two terms of `combined`: `importance` (the
    stored score) and `recency`."""

    relevance: float
    combined: float
    keyword: float | None
    vector: float | None
    importance: float
    recency: float
    fused: float = 0.0


def score_parts(
    relevance: float, importance: float, updated_at: float, now: float, w: RankWeights,
    keyword: float | None = None, vector: float | None = None, fused: float | None = None,
) -> ScoreParts:
    """The parts of one match's `combined` score, computed by the same formula (on `fused`,
    the fused relevance that orders the results, when the search set one)."""
    return ScoreParts(
        relevance=relevance,
        combined=combined_score(relevance if fused is None else fused, importance, updated_at,
                                now, w),
        keyword=keyword, vector=vector, importance=importance,
        recency=recency(updated_at, now, w.half_life),
        fused=relevance if fused is None else fused,
    )
