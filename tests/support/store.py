"""What tests of the store (`host.store.interface.EntryStore`, either backend) build entries
with: a fixed time `T0`, the persistent tiers `BOTH`, and `entry(k)`, a `NewEntry` whose key is
`key(k)` (canonical `{"k": k}`); `keyword_texts`, texts of a few words for keyword searches
to compare across backends."""

from __future__ import annotations

import random

from host.store.records import NewEntry
from protocol.keys import canonical_key

__all__ = ["BOTH", "T0", "WORDS", "entry", "key", "keyword_texts"]

BOTH = ("episodic", "semantic")
T0 = 1_800_000_000.0
# the words of `keyword_texts`: the keyword tests' queries are made of them
WORDS = ("apple", "river", "stone", "cloud", "music", "garden", "winter", "copper", "signal",
         "harbor", "lantern", "meadow")


def key(k: object) -> bytes:
    """The canonical key `{"k": k}`."""
    return canonical_key({"k": k})


def entry(k: object, content: bytes = b'"x"', tier: str = "episodic", **kw: object) -> NewEntry:
    """A new entry keyed `key(k)`; `kw`: the other fields of `NewEntry`."""
    return NewEntry(tier=tier, key=key(k), content=content, **kw)  # type: ignore[arg-type]


def keyword_texts(n: int, seed: int = 7) -> list[str]:
    """`n` texts of 1-40 words, a few words common (apple, river), some repeated in a text."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rnd.choice(WORDS[:2]) if rnd.random() < 0.3 else rnd.choice(WORDS)
                 for _ in range(rnd.randint(1, 40))]
        out.append(" ".join(words))
    return out
