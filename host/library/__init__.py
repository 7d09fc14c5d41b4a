"""The Agentic Memory library: the `Memory` model, the `Store` protocol and its backends.

    from host.library import Memory, MemoryType, MemoryImportance, JSONFileStore

    with JSONFileStore("memories.json") as store:
        m = Memory(content="the user prefers concise Python", memory_type=MemoryType.SEMANTIC,
                   importance=MemoryImportance.HIGH)
        store.set(m.id, m)
        hits = store.search("python preferences", k=5)

See docs/library.md for the API, the mapping to the wire entry and the durability model.
"""

from host.library.files import StoreLockedError
from host.library.json_store import JSONFileStore, StoreFormatError
from host.library.mapping import (
    IMPORTANCE_SCORE,
    TYPE_TIER,
    entry_to_memory,
    importance_to_score,
    memory_to_entry,
    score_to_importance,
)
from host.library.memory_store import InMemoryStore
from host.library.models import Memory, MemoryImportance, MemoryType, RetrievalResult
from host.library.protocol import AsyncStore, AsyncStoreAdapter, Store, StoreClosedError
from host.library.sqlite_store import SQLiteStore, StoreFullError

__all__ = [
    "IMPORTANCE_SCORE",
    "TYPE_TIER",
    "AsyncStore",
    "AsyncStoreAdapter",
    "InMemoryStore",
    "JSONFileStore",
    "Memory",
    "MemoryImportance",
    "MemoryType",
    "RetrievalResult",
    "SQLiteStore",
    "Store",
    "StoreClosedError",
    "StoreFormatError",
    "StoreFullError",
    "StoreLockedError",
    "entry_to_memory",
    "importance_to_score",
    "memory_to_entry",
    "score_to_importance",
]
