"""Keys for generated memories that no number can match: the relevance test and the relevance
harness (scripts/bench/eval_relevance.py) key their entries with these."""

from __future__ import annotations


def label(i: int) -> str:
    """A key value for entry `i` made of letters ("qb", "qbc"...): a key's values are part of an
    entry's searchable text, embedded too, and numbers there would match the numbers of exact
    lookups ("912 448 031") by keyword and by vector."""
    out = ""
    while True:
        i, r = divmod(i, 26)
        out = "abcdefghijklmnopqrstuvwxyz"[r] + out
        if i == 0:
            return "q" + out
