"""The in-process stores' own keyword search (host/library/search.py, `search=False`): the
share of the query's terms fed to the host's ranking formula."""

from __future__ import annotations

import pytest

from host.library import InMemoryStore, Memory, MemoryImportance
from host.library.mapping import IMPORTANCE_SCORE
from host.search.rank import RankWeights, combined_score

NO_RECENCY = RankWeights(relevance=0.7, importance=0.2, recency=0.0)


def test_combined_score_is_the_host_formula() -> None:
    """The combined score is rank.combined_score of relevance and the level's wire score."""
    s = InMemoryStore(weights=NO_RECENCY, search=False)
    m = Memory(content="alpha beta", importance=MemoryImportance.HIGH)
    s.set(m.id, m)
    hit = s.search("alpha gamma")[0]
    assert hit.relevance_score == 0.5
    expected = combined_score(0.5, IMPORTANCE_SCORE[MemoryImportance.HIGH], 0.0, 0.0, NO_RECENCY)
    assert hit.combined_score == pytest.approx(expected)


def test_stop_words_do_not_dilute() -> None:
    """Stop words in the query are not terms: "what is python" matches "python" fully."""
    s = InMemoryStore(search=False)
    m = Memory(content="python")
    s.set(m.id, m)
    assert s.search("what is python")[0].relevance_score == 1.0


@pytest.mark.parametrize(("weights", "first"), [
    (RankWeights(relevance=1.0, importance=0.0, recency=0.0), "relevant"),
    (RankWeights(relevance=0.1, importance=1.0, recency=0.0), "critical"),
])
def test_weights_decide_between_relevance_and_importance(weights: RankWeights, first: str) -> None:
    """The store ranks with the weights it was given."""
    s = InMemoryStore(weights=weights, search=False)
    s.set("relevant", Memory(content="disk quota alert", importance=MemoryImportance.LOW))
    s.set("critical", Memory(content="disk", importance=MemoryImportance.CRITICAL))
    hits = s.search("disk quota alert", k=2)
    assert hits[0].memory.content == ("disk quota alert" if first == "relevant" else "disk")


def test_equal_scores_have_a_stable_order() -> None:
    """Memories that score the same come back in key order, whatever the insertion order."""
    s = InMemoryStore(search=False)
    m = Memory(content="same")
    for key in ("c", "a", "b"):
        s.set(key, m.model_copy(update={"id": key}))
    assert [h.memory.id for h in s.search("same")] == ["a", "b", "c"]
