"""Eviction on PostgreSQL (`limits.on_full` "evict", docs/growth.md).

The eviction itself runs in the database, in the put's transaction and under the namespace's
advisory lock that every write of the namespace takes, on every host (`a2e_evict`, called by
`a2e_put_entries` when a request would pass a quota once the expired entries are collected):
two hosts never evict for the same quota at once, nor evict what the other is storing. The
host asks for it with a fifth element of the quotas array (1: evict), so the functions keep
the signatures older hosts call (an older host sends four: it refuses, as it always did).
Here: what the put's outcomes say back."""

from __future__ import annotations

from collections.abc import Sequence

from host.store.growth import PutOutcomes
from host.store.records import Refusal, StoreOutcome

__all__ = ["put_outcomes"]

_EVICTED = "evicted:"


def put_outcomes(raw: Sequence[str | None]) -> list[StoreOutcome]:
    """The outcomes of one put from `a2e_put_group_logged`'s: NULL stored, 'evicted:<n>'
    stored after evicting n entries, else the refusal's code."""
    evicted = 0
    out: list[StoreOutcome] = []
    for o in raw:
        if o is None:
            out.append(None)
        elif o.startswith(_EVICTED):
            evicted += int(o[len(_EVICTED):])
            out.append(None)
        else:
            out.append(Refusal(o))
    return PutOutcomes(out, evicted) if evicted else out
