"""Facts for the tests of consolidation on write (`test_consolidate`) and of what history keeps
of them: paraphrases and updates of one another, an entry of a fact, and a `memory/store` with
a consolidation policy, which the client's `store()` does not take."""

from __future__ import annotations

from typing import Any

from host.client import MemoryClient
from protocol.codec import new_id, now
from protocol.messages import VERSION, MemoryStoreRequest

__all__ = ["BANJO", "CONCISE", "CONCISE_AGAIN", "UKULELE", "fact", "store"]

CONCISE = "The user prefers concise Python answers."
CONCISE_AGAIN = "User likes short, concise answers in Python."
UKULELE = "I'm learning to play the ukulele."
BANJO = "I stopped the ukulele and I'm learning the banjo instead."


async def store(client: MemoryClient, entries: list[dict[str, Any]], consolidate: str = ""
                ) -> Any:
    """A `memory/store` of `entries` with the given policy ("" = the namespace's)."""
    return await client.request(MemoryStoreRequest(
        id=new_id(), version=VERSION, ts=now(), memory_id=client._mid(None),
        entries=entries, consolidate=consolidate))  # type: ignore[arg-type]


def fact(key: str, text: str, tier: str = "semantic") -> dict[str, Any]:
    return {"key": {"id": key}, "content": text, "tier": tier}
