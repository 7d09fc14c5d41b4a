"""Fusion of BM25 and vector similarity into one relevance in (0, 1)."""

from __future__ import annotations

import numpy as np
import pytest

from host.search.fusion import CALIBRATIONS, calibrated, features, fuse, zscores

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


def test_calibrated_relevance_is_one_scale_for_every_query() -> None:
    """A candidate's calibrated relevance depends on its own features only (not on how many
    other candidates there are), rises with its cosine and its fused z-score, and is a
    logistic of the weighted features."""
    w = CALIBRATIONS["minilm"]
    one = calibrated(np.array([0.8]), np.array([0.6]), np.array([3.0]), w)
    many = calibrated(np.array([0.8, 0.5, 0.2]), np.array([0.6, 0.1, np.nan]),
                      np.array([3.0, 0.0, 1.0]), w)
    assert np.isclose(one[0], many[0])
    assert many[0] > many[1]
    higher = calibrated(np.array([0.8]), np.array([0.9]), np.array([3.0]), w)
    assert higher[0] > one[0]
    x = features(np.array([0.8]), np.array([0.6]), np.array([3.0]))[0]
    assert np.isclose(one[0], 1 / (1 + np.exp(-(w[0] + x @ np.array(w[1:])))))
