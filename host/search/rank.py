"""The one ranking formula: relevance, importance and recency combined.

    combined = (w_rel * relevance + w_imp * importance + w_rec * recency) / (w_rel + w_imp + w_rec)
    recency  = 0.5 ** (age_seconds / half_life)          (1.0 for an entry updated now)

`relevance` is the query match in [0, 1] (see `host.search`), `importance` the entry's stored
`score` in [0, 1]. The weights and the half-life come from `RankingConfig`; the result stays in
[0, 1]. Every path that ranks (the host, the library, the MCP tools) calls `combined_score`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RankWeights", "combined_score", "recency"]


@dataclass(frozen=True, slots=True)
class RankWeights:
    """Weights of the combined score; see the module docstring."""

    relevance: float = 0.7
    importance: float = 0.2
    recency: float = 0.1
    half_life: float = 7 * 24 * 3600.0

    @classmethod
    def from_config(cls, cfg: object) -> RankWeights:
        """Build from a `RankingConfig` (or anything with the same attributes)."""
        return cls(
            relevance=cfg.relevance_weight,  # type: ignore[attr-defined]
            importance=cfg.importance_weight,  # type: ignore[attr-defined]
            recency=cfg.recency_weight,  # type: ignore[attr-defined]
            half_life=cfg.recency_half_life,  # type: ignore[attr-defined]
        )


def recency(updated_at: float, now: float, half_life: float) -> float:
    """Recency in (0, 1]: 1.0 when `updated_at` is `now`, halving every `half_life` seconds."""
    age = now - updated_at
    if age <= 0:
        return 1.0
    return float(0.5 ** (age / half_life))


def combined_score(
    relevance: float, importance: float, updated_at: float, now: float, w: RankWeights
) -> float:
    """The combined score in [0, 1] of one match; higher ranks first."""
    total = w.relevance + w.importance + w.recency
    if total <= 0:
        return relevance
    r = recency(updated_at, now, w.half_life)
    return (w.relevance * relevance + w.importance * importance + w.recency * r) / total
