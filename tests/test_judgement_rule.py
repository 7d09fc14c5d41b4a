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


def test_a_fact_that_ended_ranks_after_its_nearest_current_one() -> None:
    """A match whose bounds do not hold at the read (`current` False: its fact ended) moves
    below its most similar current match, which carries its key; no word of change is needed,
    and the current match need not be the newer (a past fact recorded after its successor).
    The match between them follows."""
    texts = ["Alice works at Acme.", "The printer is out of toner.", "Alice works at Globex."]
    newness = [(3.0, 3), (2.0, 2), (1.0, 1)]  # the ended fact written last
    sims = sims_of({(0, 2): 0.6}, 3)
    assert plan(sims, texts, newness) == [(0, [], []), (1, [], []), (2, [], [])]
    got = plan(sims, texts, newness, current=[False, True, True])
    assert got == [(2, [0], []), (0, [], []), (1, [], [])]


def test_bounds_that_hold_for_every_match_change_nothing() -> None:
    """Every match current (no bounds, or bounds that hold): the plan without bounds."""
    texts = ["I work at Northwind Bank.", "The printer is out of toner.",
             "I switched jobs: now at Helios Robotics."]
    sims = sims_of({(0, 2): 0.6}, 3)
    newness = [(1.0, 1), (2.0, 2), (3.0, 3)]
    assert plan(sims, texts, newness, current=[True] * 3) == plan(sims, texts, newness)


def test_an_ended_fact_only_near_a_current_one_keeps_its_place() -> None:
    """A current fact near two ended ones supersedes only its nearest (each the other's
    nearest across the line, as step 2's pairs): the first phone, asked about, stays first."""
    texts = ["My first mobile phone was a Nokia 3310.", "My phone is a Pixel 8.",
             "My phone is an iPhone 11."]
    sims = sims_of({(0, 1): 0.55, (1, 2): 0.75, (0, 2): 0.5}, 3)
    got = plan(sims, texts, [(1.0, 1), (3.0, 3), (2.0, 2)], current=[False, True, False])
    assert got == [(0, [], []), (1, [2], []), (2, [], [])]


def test_an_ended_fact_without_a_close_current_one_keeps_its_place() -> None:
    """The only answer about the past ("where did I live before?") stays first: the current
    matches are all below the supersession threshold from it."""
    texts = ["I lived in Paris until 2020.", "The printer is out of toner.", "Lunch is pizza."]
    got = plan(sims_of({(0, 1): 0.3}, 3), texts, [(1.0, 1), (2.0, 2), (3.0, 3)],
               current=[False, True, True])
    assert got == [(0, [], []), (1, [], []), (2, [], [])]


def test_a_fact_not_yet_valid_ranks_after_the_current_one() -> None:
    """A match whose `valid_from` is still to come is not current either: the fact that holds
    now ranks above it."""
    texts = ["From March I will work at Initech.", "I work at Globex."]
    got = plan(sims_of({(0, 1): 0.55}, 2), texts, [(2.0, 2), (1.0, 1)],
               current=[False, True])
    assert got == [(1, [0], []), (0, [], [])]


def test_an_ended_update_does_not_supersede_a_current_fact() -> None:
    """A newer match that says it changed but has ended does not go above a current one (the
    bounds are the agent's word): the current one supersedes it instead."""
    texts = ["I work at Northwind Bank.", "I switched jobs: now at Helios Robotics."]
    sims = sims_of({(0, 1): 0.6}, 2)
    newness = [(1.0, 1), (2.0, 2)]
    assert plan(sims, texts, newness) == [(1, [0], []), (0, [], [])]
    assert plan(sims, texts, newness, current=[True, False]) == [(0, [1], []), (1, [], [])]


def test_a_chain_of_ended_facts_follows_the_current_one() -> None:
    """An ended update above the ended fact it replaced (step 2) and the current fact above
    both (step 3): the current fact takes the chain's first place."""
    texts = ["I live in Paris.", "I moved to Lisbon.", "The printer is out of toner.",
             "I live in Berlin."]
    sims = sims_of({(0, 1): 0.7, (1, 3): 0.6, (0, 3): 0.5}, 4)
    newness = [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4)]
    got = plan(sims, texts, newness, current=[False, False, True, True])
    assert [k for k, _s, _c in got] == [3, 1, 0, 2]
    assert got[0] == (3, [1], []) and got[1] == (1, [0], [])


def test_a_current_and_an_ended_saying_do_not_collapse() -> None:
    """Two sayings of one fact, one ended: not near-duplicates (one is over), the current one
    ranks first."""
    texts = ["My dog's name is Biscuit.", "I have a dog named Biscuit."]
    sims = sims_of({(0, 1): 0.9}, 2)
    newness = [(2.0, 2), (1.0, 1)]
    assert plan(sims, texts, newness) == [(0, [], [1])]
    got = plan(sims, texts, newness, current=[False, True])
    assert got == [(1, [0], []), (0, [], [])]
