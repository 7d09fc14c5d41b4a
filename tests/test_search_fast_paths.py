"""The query path's fast paths answer as the straightforward code they replaced."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from host.search.judgement import Thresholds, conflict, plan, says_change
from host.text.keyword import coverage, tokens

TEXTS = (
    "I live in Paris.", "I moved to Lisbon now.", "I live in Lisbon too.",
    "My favourite food is sushi.", "My favourite food is now ramen.", "Meeting on Monday at 3.",
    "Meeting on Tuesday at 4.", "Alice plays the violin.", "Bob plays the violin.",
    "I switched to dark mode.", "I use light mode.", "",
)


def _plan_before(sims: np.ndarray, texts: Sequence[str], newness: Sequence[tuple[float, int]],
                 th: Thresholds, relevance: Sequence[float], supersede: bool, collapse: bool,
                 ) -> list[tuple[int, list[int], list[int]]]:
    """`judgement.plan` as it was written first: every group looked at for every match, the
    cosines read one numpy scalar at a time, every text read."""
    n = len(texts)
    ok = np.isfinite(np.diag(sims)) if n else np.zeros(0, dtype=bool)
    ok = ok & (np.asarray(relevance, dtype=np.float64) >= th.relevance)
    groups: list[list[int]] = []
    for i in range(n):
        if ok[i] and collapse:
            for g in groups:
                near = [sims[i, j] >= th.duplicate for j in g]
                if ok[g[0]] and (any(near) if th.single else all(near)) and not any(
                        conflict(texts[i], texts[j]) or says_change(texts[i], texts[j])
                        or says_change(texts[j], texts[i]) for j in g):
                    g.append(i)
                    break
            else:
                groups.append([i])
        else:
            groups.append([i])
    reps = [max(g, key=lambda j: newness[j]) for g in groups]
    sup: list[list[int]] = [[] for _ in groups]
    judged = [a for a, r in enumerate(reps) if ok[r]] if supersede else []
    if len(judged) > 1:
        rows = [reps[a] for a in judged]
        close = sims[np.ix_(rows, rows)].copy()
        np.fill_diagonal(close, -np.inf)
        nearest = close.argmax(axis=1).tolist()
        for x, a in enumerate(judged):
            y = nearest[x]
            b = judged[y]
            ra, rb = reps[a], reps[b]
            if (nearest[y] == x and newness[ra] > newness[rb] and sims[ra, rb] >= th.supersede
                    and says_change(texts[ra], texts[rb])):
                sup[a].append(b)
    order = sorted(range(len(groups)), key=lambda a: (
        min([a] + sup[a]), 0 if sup[a] else 1, tuple(-x for x in newness[reps[a]]), a))
    return [(reps[a], [reps[b] for b in sorted(sup[a])], [j for j in groups[a] if j != reps[a]])
            for a in order]


def _case(rng: random.Random) -> tuple[np.ndarray, list[str], list[tuple[float, int]],
                                       list[float]]:
    """Matches in a few clusters of near-duplicates, some without a vector."""
    n = rng.randint(0, 24)
    centres = np.random.default_rng(rng.randint(0, 2**31)).standard_normal((3, 8))
    vecs = centres[[rng.randrange(3) for _ in range(n)]] + np.random.default_rng(
        rng.randint(0, 2**31)).standard_normal((n, 8)) * rng.choice((0.05, 0.3, 1.0))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True) if n else 1
    sims = vecs @ vecs.T if n else np.zeros((0, 0))
    for k in range(n):
        if rng.random() < 0.15:
            sims[k, :] = sims[:, k] = np.nan
    texts = [rng.choice(TEXTS) for _ in range(n)]
    newness = [(float(rng.randint(0, 5)), k) for k in range(n)]
    relevance = [rng.random() for _ in range(n)]
    return sims, texts, newness, relevance


def test_judgement_plan_decides_as_before() -> None:
    """The judgement's plan (collapse on a boolean matrix, groups skipped when a match has no
    near-duplicate before it, texts read lazily and kept) gives the plan of the first code on
    random matches, for every combination of its switches."""
    rng = random.Random(7)
    for _ in range(400):
        sims, texts, newness, relevance = _case(rng)
        th = Thresholds(single=rng.random() < 0.3)
        for supersede in (True, False):
            for collapse in (True, False):
                got = plan(sims, texts, newness, th, relevance, supersede, collapse)
                assert got == _plan_before(sims, texts, newness, th, relevance, supersede,
                                           collapse)
                # bounds that hold for every match read as no bounds
                assert plan(sims, texts, newness, th, relevance, supersede, collapse,
                            [True] * len(texts)) == got


def test_judgement_plan_with_bounds_puts_each_current_match_above_what_it_supersedes() -> None:
    """With some matches not valid at the read (random), the plan is still an order of every
    match once, each match that supersedes ranks above those it supersedes, no match not
    valid now supersedes one that is, and a group never mixes the two."""
    rng = random.Random(11)
    for _ in range(400):
        sims, texts, newness, relevance = _case(rng)
        current = [rng.random() < 0.6 for _ in texts]
        th = Thresholds(single=rng.random() < 0.3)
        for collapse in (True, False):
            got = plan(sims, texts, newness, th, relevance, True, collapse, current)
            seen = sorted([k for k, _s, _c in got] + [j for _k, _s, c in got for j in c])
            assert seen == list(range(len(texts)))
            at = {k: n for n, (k, _s, _c) in enumerate(got)}
            for k, sup, coll in got:
                assert all(current[j] == current[k] for j in coll)
                for j in sup:
                    assert at[k] < at[j]
                    assert current[k] or not current[j]


def test_keyword_coverage_kept_per_text_answers_as_tokenised_anew() -> None:
    """`coverage` (a candidate's share of the query's terms, kept per text) gives the share
    counted from the text's tokens anew, for texts met again and a long text (not kept)."""
    rng = random.Random(3)
    words = ["alpha", "Bravo", "café", "cafe", "x-ray", "42", "the", "Zoë", "naïve", "delta"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(300)]
    texts += [" ".join(words) * 400]  # longer than what is kept
    for _ in range(3):
        for text in texts:
            terms = tuple(dict.fromkeys(rng.choice(words).lower() for _ in range(3)))
            present = set(tokens(text))
            want = sum(1 for t in terms if t in present) / len(terms)
            assert coverage(terms, text) == want
    assert coverage((), "alpha") == 0.0
