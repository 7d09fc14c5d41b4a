"""The exact vector index: add, replace, remove, and filters applied before ranking."""

from __future__ import annotations

from typing import Any

import numpy as np

from host.search.index import VectorIndex, VectorIndexes, group_of

TEXTS = [
    "Alice keeps her passport in the top drawer of the desk.",
    "Bob's favourite food is spicy ramen from the corner shop.",
    "The team agreed to ship the release on Friday afternoon.",
    "The server room temperature alarm went off twice last night.",
]
ALICE, BOB, SHARED = group_of("episodic", "alice"), group_of("episodic", "bob"), group_of("semantic", "")


def _index(embedder: Any, groups: list[str], expires: list[float | None] | None = None) -> VectorIndex:
    index = VectorIndex(embedder.dim, capacity=2)  # small: exercises growth
    index.add(range(1, len(TEXTS) + 1), embedder.embed(TEXTS), groups, expires or [None] * 4)
    return index


def test_nearest_first_with_background(embedder: Any) -> None:
    """A query finds its paraphrase first; hits carry the similarity mean/std of allowed rows."""
    index = _index(embedder, [SHARED] * 4)
    q = embedder.embed_queries(["Where does Alice store her travel documents?"])[0]
    hits = index.search(q, k=2)
    assert hits.ids.tolist()[0] == 1 and len(hits.ids) == 2
    assert hits.similarities[0] >= hits.similarities[1]
    assert hits.allowed == 4 and hits.std > 0 and hits.similarities[0] > hits.mean


def test_groups_filter_before_ranking(embedder: Any) -> None:
    """Bob's query never ranks Alice's episodic rows, however similar they are."""
    index = _index(embedder, [ALICE, BOB, SHARED, SHARED])
    q = embedder.embed_queries(["Where does Alice store her passport?"])[0]
    hits = index.search(q, k=10, groups=[BOB, SHARED])
    assert 1 not in hits.ids.tolist() and sorted(hits.ids.tolist()) == [2, 3, 4]
    assert index.search(q, k=10, groups=["episodic/nobody"]).ids.size == 0


def test_expired_and_only_filters(embedder: Any) -> None:
    """Expired rows and rows outside the allowed ids are not ranked."""
    index = _index(embedder, [SHARED] * 4, [100.0, None, None, 50.0])
    q = embedder.embed_queries(["passport drawer"])[0]
    assert sorted(index.search(q, 10, now=60.0).ids.tolist()) == [1, 2, 3]
    assert sorted(index.search(q, 10, now=120.0).ids.tolist()) == [2, 3]
    assert index.search(q, 10, only=np.array([3, 4])).ids.tolist()[0] in (3, 4)
    assert sorted(index.search(q, 10, only=np.array([3, 4])).ids.tolist()) == [3, 4]


def test_remove_and_replace(embedder: Any) -> None:
    """A removed row is gone from search and similarity; re-adding an id replaces its row."""
    index = _index(embedder, [SHARED] * 4)
    q = embedder.embed_queries(["Where is Alice's passport?"])[0]
    assert index.remove([1, 99]) == 1 and len(index) == 3 and 1 not in index
    assert 1 not in index.search(q, 10).ids.tolist()
    assert np.isnan(index.similarity(q, [1])[0]) and np.isfinite(index.similarity(q, [2])[0])
    index.add([2], embedder.embed([TEXTS[0]]), [SHARED], [None])  # id 2 now holds Alice's text
    assert index.search(q, 1).ids.tolist() == [2] and len(index) == 3


def test_similarity_matches_search(embedder: Any) -> None:
    """`similarity` gives the same cosine the search ranked by."""
    index = _index(embedder, [SHARED] * 4)
    q = embedder.embed_queries(["release date"])[0]
    hits = index.search(q, 4)
    assert np.allclose(index.similarity(q, hits.ids.tolist()), hits.similarities, atol=1e-5)


def test_indexes_keep_namespaces_apart(embedder: Any) -> None:
    """Each namespace has its own index; removal by id finds the right one."""
    idx = VectorIndexes(embedder.dim)
    vecs = embedder.embed(TEXTS[:2])
    idx.add("ns1", [1], vecs[:1], [SHARED], [None])
    idx.add("ns2", [2], vecs[1:], [SHARED], [None])
    q = embedder.embed_queries(["passport"])[0]
    assert idx.get("ns1").search(q, 5).ids.tolist() == [1]  # type: ignore[union-attr]
    assert idx.get("ns2").search(q, 5).ids.tolist() == [2]  # type: ignore[union-attr]
    assert idx.get("ns3") is None and idx.remove([2]) == 1 and len(idx) == 1
