"""What the search tests share: an entry as a store request carries it, the keys of a
retrieve's reply, and a small memory where only meaning finds the answer (`PUPPY` and its
`PARAPHRASE` share no word; `DISTRACTORS` are about other things)."""

from __future__ import annotations

from typing import Any

__all__ = ["DISTRACTORS", "PARAPHRASE", "PUPPY", "entry", "keys_of"]

DISTRACTORS = [
    "The quarterly budget review is scheduled for Monday morning.",
    "Python 3.12 removed the distutils module from the standard library.",
    "The office printer on the third floor is out of toner again.",
    "Marcus is training for a half marathon in October.",
    "The team retrospective moved to the small meeting room.",
    "Invoices must be approved by two managers before payment.",
    "The staging server runs Debian and PostgreSQL 16.",
    "Lunch on Friday is pizza from the place around the corner.",
]
PUPPY = "Caroline adopted a puppy from the animal shelter last week."
PARAPHRASE = "Who got a new dog recently?"  # no word in common with PUPPY


def entry(key: Any, content: Any, tier: str = "episodic", **kw: Any) -> dict[str, Any]:
    """An entry of a `memory/store` request."""
    return {"key": key, "content": content, "tier": tier, **kw}


def keys_of(reply: Any) -> list[Any]:
    """The keys of a retrieve's entries, in order."""
    return [e["key"] for e in reply.entries]
