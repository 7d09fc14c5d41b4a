"""`Table`: the rows of an in-process store, with an inverted index from token to keys.

get/put/pop are O(1) in the number of rows (put and pop also touch one posting set per distinct
token of the memory). `candidates(terms)` returns the rows sharing a term with a query, so a
search costs what its matches cost, not what the store holds: O(n) only when everything matches.
Not thread-safe: the store that owns a table holds its lock around every call.
"""

from __future__ import annotations

from host.library.search import Row

__all__ = ["Table"]


class Table:
    """Rows by key, plus the postings (token -> keys) of their content's tokens."""

    __slots__ = ("rows", "_postings")

    def __init__(self, rows: dict[str, Row] | None = None) -> None:
        self.rows: dict[str, Row] = {}
        self._postings: dict[str, set[str]] = {}
        for key, row in (rows or {}).items():
            self.put(key, row)

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, key: str) -> Row | None:
        """The row under `key`, or None."""
        return self.rows.get(key)

    def put(self, key: str, row: Row) -> None:
        """Store `row` under `key` (replacing any row there) and index its tokens."""
        old = self.rows.get(key)
        self.rows[key] = row
        if old is not None:
            if old.tokens is row.tokens or old.tokens == row.tokens:
                return
            self._unindex(key, old.tokens - row.tokens)
            added = row.tokens - old.tokens
        else:
            added = row.tokens
        postings = self._postings
        for token in added:
            keys = postings.get(token)
            if keys is None:
                postings[token] = {key}
            else:
                keys.add(key)

    def pop(self, key: str) -> Row | None:
        """Remove and return the row under `key` (None when there was none)."""
        row = self.rows.pop(key, None)
        if row is not None:
            self._unindex(key, row.tokens)
        return row

    def _unindex(self, key: str, tokens: frozenset[str]) -> None:
        postings = self._postings
        for token in tokens:
            keys = postings[token]
            keys.discard(key)
            if not keys:
                del postings[token]

    def candidates(self, terms: tuple[str, ...]) -> list[tuple[str, Row]]:
        """The (key, row) pairs whose tokens include at least one of `terms`."""
        postings = self._postings
        if len(terms) == 1:
            keys: set[str] = postings.get(terms[0], set())
        else:
            keys = set().union(*(postings.get(t, ()) for t in terms))
        rows = self.rows
        return [(k, rows[k]) for k in keys]
