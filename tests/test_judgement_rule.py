"""The judgement rule itself (`host.search.judgement.plan`) on given similarities and texts: who
supersedes whom, what collapses, and what never moves."""

from __future__ import annotations

import numpy as np

from host.search.judgement import Thresholds, conflict, plan, says_change


def sims_of(pairs: dict[tuple[int, int], float], n: int) -> np.ndarray:
    """An (n, n) cosine matrix: 1 on the diagonal, `pairs` (both ways), 0.1 elsewhere."""
    out = np.full((n, n), 0.1)
    np.fill_diagonal(out, 1.0)
    for (a, b), s in pairs.items():
        out[a, b] = out[b, a] = s
    return out


def test_a_newer_match_that_says_it_changed_takes_the_place_above_the_older() -> None:
    """The update ranked third moves just above the fact it supersedes (ranked first), the
    match between them follows, and the fact carries nothing."""
    texts = ["I work at Northwind Bank.", "The printer is out of toner.",
             "I switched jobs: now at Helios Robotics."]
    got = plan(sims_of({(0, 2): 0.6}, 3), texts, [(1.0, 1), (2.0, 2), (3.0, 3)])
    assert got == [(2, [0], []), (0, [], []), (1, [], [])]


def test_a_newer_match_supersedes_only_its_mutual_nearest() -> None:
    """A long turn that says "now" and resembles several older matches supersedes only the
    one that is its nearest and has it as nearest; the others keep their places."""
    texts = ["We talked about the garden.", "The garden needs water.", "Roses in the garden.",
             "Now the garden is full of roses and we water it daily."]
    sims = sims_of({(0, 3): 0.55, (1, 3): 0.6, (2, 3): 0.7, (0, 1): 0.3, (1, 2): 0.3}, 4)
    got = plan(sims, texts, [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4)])
    assert [(k, sup) for k, sup, _c in got] == [(0, []), (1, []), (3, [2]), (2, [])]


def test_nothing_moves_without_a_word_of_change() -> None:
    """Similar but different facts (penicillin after peanuts, at MiniLM's cosine of the pair,
    0.51) keep the order the ranking gave them: the newer does not say it changed, and they
    are too far apart to collapse."""
    texts = ["I'm allergic to peanuts.", "I'm allergic to penicillin."]
    got = plan(sims_of({(0, 1): 0.51}, 2), texts, [(1.0, 1), (2.0, 2)])
    assert got == [(0, [], []), (1, [], [])]
    assert not says_change(texts[1], texts[0])


def test_numbers_times_and_names_keep_near_duplicates_apart() -> None:
    """Texts naming other numbers, times or names conflict; the same fact said again does not,
    and collapses into its newest saying, which takes the best-ranked one's place."""
    assert conflict("The Atlas deadline is 3 March.", "The Atlas deadline is 21 April.")
    assert conflict("Dad visited the museum on Monday.", "Dad visited the museum last week.")
    assert conflict("Our cat Luna is old.", "Our cat Pixel is old.")
    assert not conflict("My dog's name is Biscuit.", "I have a dog named Biscuit.")
    texts = ["My dog's name is Biscuit.", "The printer is out of toner.",
             "I have a dog named Biscuit."]
    got = plan(sims_of({(0, 2): 0.9}, 3), texts, [(1.0, 1), (2.0, 2), (3.0, 3)],
               Thresholds(), supersede=False)
    assert got == [(2, [], [0]), (1, [], [])]


def test_a_match_below_the_relevance_gate_is_not_judged() -> None:
    """An update whose relevance to the question is under the gate neither supersedes nor
    moves."""
    texts = ["I work at Northwind Bank.", "I switched jobs: now at Helios Robotics."]
    got = plan(sims_of({(0, 1): 0.7}, 2), texts, [(1.0, 1), (2.0, 2)], relevance=[0.9, 0.1])
    assert got == [(0, [], []), (1, [], [])]
