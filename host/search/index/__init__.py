"""Vector indexes: exact (`ExactIndex`), approximate (`AnnIndex`), and the budgeted set of a
host's keys (`VectorIndexes`). `host.search.vectors` re-exports the same names."""

from host.search.index.cache import VectorIndexes
from host.search.index.exact import CodedIndex, ExactIndex
from host.search.index.loading import Loader
from host.search.index.rows import group_of
from host.store.records import Hits, Pending, digest

VectorIndex = ExactIndex  # the float32 exact index, its former name


def approximate(index: object) -> bool:
    """True for an `AnnIndex` or a `CodedIndex` (8-bit codes: their best candidates want
    rescoring on float32); False for an exact float index, None, or a store's answer standing
    in for an index."""
    return getattr(index, "kind", "exact") == "ann" or bool(getattr(index, "coded", False))


__all__ = ["CodedIndex", "ExactIndex", "Hits", "Loader", "Pending", "VectorIndex", "VectorIndexes",
           "approximate", "digest", "group_of"]
