"""The token index of in-process stores (host/library/table.py) agrees with a full scan."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from host.library import Memory
from host.library.search import make_row
from host.library.table import Table

WORDS = ["alpha", "beta", "gamma", "delta", "eps"]
keys = st.sampled_from(["k1", "k2", "k3", "k4"])
texts = st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join)
ops = st.lists(st.tuples(st.sampled_from(["put", "pop"]), keys, texts), max_size=30)


@given(ops, st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_candidates_equal_a_scan(script: list[tuple[str, str, str]], terms: list[str]) -> None:
    """After any puts and pops, candidates are exactly the rows sharing a term, and the index
    holds no key that is gone."""
    table = Table()
    for op, key, text in script:
        if op == "put":
            table.put(key, make_row(Memory(content=text)))
        else:
            table.pop(key)
    got = {k for k, _ in table.candidates(tuple(terms))}
    expected = {k for k, r in table.rows.items() if r.tokens & set(terms)}
    assert got == expected
    assert not [k for k, _ in table.candidates(tuple(WORDS)) if k not in table.rows]


def test_rebuilt_from_rows() -> None:
    """A table built from a dict of rows indexes all of them."""
    rows = {f"k{i}": make_row(Memory(content=f"word{i} common")) for i in range(5)}
    table = Table(rows)
    assert {k for k, _ in table.candidates(("common",))} == set(rows)
    assert [k for k, _ in table.candidates(("word3",))] == ["k3"]
