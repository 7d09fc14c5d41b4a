"""The ranking of a query's candidates: BM25 and similarity fused for the order, and the
relevance of a pair (query, entry) that depends on that pair alone."""

from __future__ import annotations

import numpy as np
import pytest

from host.search.ranking import (
    CALIBRATIONS,
    cosine_at_half,
    fuse,
    pair_features,
    pair_relevance,
    zscores,
)
from host.text.keyword import pair_coverage, query_terms, stem, term_weights

NAN = float("nan")


def test_relevance_in_unit_interval_and_both_signals_win() -> None:
    """Relevance stays in (0, 1); a candidate strong on both signals ranks above one strong
    on a single signal."""
    kw = np.array([9.0, 9.0, 0.0, 1.0])
    vec = np.array([0.90, 0.70, 0.90, 0.70])
    rel = fuse(kw, vec)
    assert np.all((rel > 0) & (rel < 1))
    assert rel[0] > rel[1] and rel[0] > rel[2] and min(rel[1], rel[2]) > rel[3]


def test_candidate_without_vector_ranks_on_keywords() -> None:
    """An entry whose vector is not written yet is ranked by its keyword z-score alone."""
    rel = fuse(np.array([5.0, 1.0, 0.0]), np.array([NAN, 0.8, 0.9]))
    assert rel[0] > 0.5 and rel[0] == pytest.approx(1 / (1 + np.exp(-zscores(np.array([5.0, 1, 0]))[0])))


def test_weights_shift_the_order() -> None:
    """With the vector weight at 0, keyword order decides; with the keyword weight at 0,
    similarity decides."""
    kw, vec = np.array([3.0, 1.0]), np.array([0.5, 0.9])
    assert np.argmax(fuse(kw, vec, 1.0, 0.0)) == 0
    assert np.argmax(fuse(kw, vec, 0.0, 1.0)) == 1


def test_no_spread_gives_half() -> None:
    """A lone candidate, or candidates equal on every signal, get relevance 0.5."""
    assert fuse(np.array([4.0]), np.array([0.8])).tolist() == [0.5]
    assert fuse(np.array([2.0, 2.0]), np.array([NAN, NAN])).tolist() == [0.5, 0.5]


def test_mismatched_lengths_raise() -> None:
    """Keyword and vector arrays must describe the same candidates."""
    with pytest.raises(ValueError):
        fuse(np.array([1.0, 2.0]), np.array([0.5]))


def test_basis_sets_the_scale_without_moving_it() -> None:
    """With a basis mask, the other candidates are scored on the basis candidates' scale: adding
    a candidate outside the basis leaves every basis candidate's relevance unchanged."""
    kw = np.array([3.0, 1.0, 0.0])
    vec = np.array([0.9, 0.5, 0.7])
    alone = fuse(kw[:2], vec[:2])
    basis = np.array([True, True, False])
    both = fuse(kw, vec, basis=basis)
    assert np.allclose(both[:2], alone)
    assert not np.allclose(fuse(kw, vec)[:2], alone)
    assert 0 < both[2] < 1


def test_pair_relevance_depends_on_the_pair_alone() -> None:
    """A pair's relevance is the same however many other candidates there are, rises with its
    cosine and its coverage, and is the logistic of the weighted features."""
    w = CALIBRATIONS["minilm"]
    one = pair_relevance(np.array([0.6]), np.array([0.5]), w, 0.05)
    many = pair_relevance(np.array([0.6, 0.1, NAN]), np.array([0.5, 0.0, 1.0]), w, 0.05)
    assert np.isclose(one[0], many[0])
    assert many[0] > many[1]
    assert pair_relevance(np.array([0.8]), np.array([0.5]), w, 0.05)[0] > one[0]
    assert pair_relevance(np.array([0.6]), np.array([1.0]), w, 0.05)[0] > one[0]
    x = pair_features(np.array([0.6]), np.array([0.5]), 0.05)[0]
    assert np.isclose(one[0], 1 / (1 + np.exp(-(w[0] + x @ np.array(w[1:])))))


def test_the_cosine_at_half_gives_relevance_one_half() -> None:
    """`cosine_at_half` is the cosine at which an entry sharing no term reaches 0.5."""
    w = CALIBRATIONS["minilm"]
    c = cosine_at_half(w, 0.08)
    assert np.isclose(pair_relevance(np.array([c]), np.array([0.0]), w, 0.08)[0], 0.5)
    assert cosine_at_half(CALIBRATIONS["none"]) == np.inf


def test_without_a_vector_relevance_comes_from_shared_words() -> None:
    """An entry without a vector (not embedded yet, a working entry) that holds every term of
    the query passes 0.5; one holding none stays far below."""
    w = CALIBRATIONS["minilm"]
    rel = pair_relevance(np.array([NAN, NAN]), np.array([1.0, 0.0]), w, 0.05)
    assert rel[0] > 0.5 > 0.1 > rel[1]


def test_possessives_and_contractions_are_no_terms() -> None:
    """The pieces "'s", "n't", "'re" split off words are no search terms: "What's the weather?"
    does not match "The user's laptop" on "s"."""
    assert query_terms("What's the weather?") == ("weather",)
    assert query_terms("I don't know, they're here") == ("know", "here")
    assert pair_coverage(term_weights("What's the weather?"), "The user's laptop") == 0.0


def test_coverage_meets_word_forms_and_discounts_common_words() -> None:
    """Plural and -ing forms meet their stem, and a common word of a question counts a third."""
    assert stem("lessons") == stem("lesson") and stem("lives") == stem("live")
    w = term_weights("Where does my mother live?")
    assert pair_coverage(w, "The user's mother lives in Edinburgh.") == 1.0
    w = term_weights("What do I need for the exam?")
    assert pair_coverage(w, "I need a pen") == pytest.approx(0.25)
