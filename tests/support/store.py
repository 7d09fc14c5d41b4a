"""What tests of the store (`host.store.interface.EntryStore`, either backend) build entries
with: a fixed time `T0`, the persistent tiers `BOTH`, and `entry(k)`, a `NewEntry` whose key is
`key(k)` (canonical `{"k": k}`)."""

from __future__ import annotations

from host.store.records import NewEntry
from protocol.keys import canonical_key

__all__ = ["BOTH", "T0", "entry", "key"]

BOTH = ("episodic", "semantic")
T0 = 1_800_000_000.0


def key(k: object) -> bytes:
    """The canonical key `{"k": k}`."""
    return canonical_key({"k": k})


def entry(k: object, content: bytes = b'"x"', tier: str = "episodic", **kw: object) -> NewEntry:
    """A new entry keyed `key(k)`; `kw`: the other fields of `NewEntry`."""
    return NewEntry(tier=tier, key=key(k), content=content, **kw)  # type: ignore[arg-type]
