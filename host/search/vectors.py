"""The vector indexes, under their former module name: see `host.search.index`."""

from host.search.index import (
    ExactIndex,
    Hits,
    Loader,
    Pending,
    VectorIndex,
    VectorIndexes,
    approximate,
    digest,
    group_of,
)

__all__ = ["ExactIndex", "Hits", "Loader", "Pending", "VectorIndex", "VectorIndexes",
           "approximate", "digest", "group_of"]
