"""Bounded growth, on every backend (docs/growth.md): what a put that evicted says.

With `limits.on_full` "evict" a put that would pass a quota first removes entries of the
storing agent (`host.store.sqlite.evict`, `a2e_put_entries` on PostgreSQL). Its outcomes are
then a `PutOutcomes`: the list `EntryStore.put` returns, with how many entries went, which the
store reply carries (`evicted`)."""

from __future__ import annotations

from host.store.base import StoreOutcome

__all__ = ["PutOutcomes", "evicted_by"]


class PutOutcomes(list[StoreOutcome]):
    """The outcomes of a put, one an entry, and the entries it evicted to make room."""

    __slots__ = ("evicted",)

    def __init__(self, outcomes: list[StoreOutcome], evicted: int = 0) -> None:
        super().__init__(outcomes)
        self.evicted = evicted


def evicted_by(outcomes: object) -> int:
    """The entries a put evicted, from what `EntryStore.put` returned (0: none, or a store
    that never evicts)."""
    return outcomes.evicted if isinstance(outcomes, PutOutcomes) else 0
