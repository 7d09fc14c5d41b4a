"""Former home of the store interface, split into `host.store.records` (the values),
`host.store.interface` (`EntryStore` and the optional capabilities) and `host.store.admin`
(`StoreAdmin`). Kept while the import lines move; import from those modules."""

from typing import TypeAlias

from host.store.admin import ExportRow, NamespaceStats, StoreAdmin
from host.store.interface import (
    ChangeNotices,
    EntryStore,
    NearSearch,
    NotReadyReason,
    VectorSearch,
    VectorStore,
)
from host.store.records import (
    PERSISTENT_TIERS,
    BrowsedEntry,
    BrowseFilter,
    Change,
    ClientRows,
    Hits,
    NamespaceOverview,
    NewEntry,
    Pending,
    Query,
    Quotas,
    Refusal,
    Scope,
    StorageFull,
    StoredEntry,
    StoreOutcome,
    digest,
    owner_for,
    scope_token,
    stored_bytes,
)

# the capabilities both backends had, now part of `EntryStore`, and those now in `VectorStore`
AdjustableQuotas: TypeAlias = EntryStore
Browse: TypeAlias = EntryStore
ChangeLog: TypeAlias = EntryStore
ClientSpaceReads: TypeAlias = EntryStore
ClientVectors: TypeAlias = EntryStore
KeywordStats: TypeAlias = EntryStore
StoreExtensions: TypeAlias = EntryStore
StoredVectors: TypeAlias = EntryStore
TierCounts: TypeAlias = EntryStore
VectorQueue: TypeAlias = EntryStore
NamespaceVectors: TypeAlias = VectorStore
VectorCatchUp: TypeAlias = VectorStore

__all__ = [
    "PERSISTENT_TIERS", "AdjustableQuotas", "Browse", "BrowseFilter", "BrowsedEntry", "Change",
    "ChangeLog", "ChangeNotices", "ClientRows", "ClientSpaceReads", "ClientVectors",
    "EntryStore", "ExportRow", "Hits", "KeywordStats", "NamespaceOverview", "NamespaceStats",
    "NamespaceVectors", "NearSearch", "NewEntry", "NotReadyReason", "Pending", "Query",
    "Quotas", "Refusal", "Scope", "StorageFull", "StoreAdmin", "StoreExtensions",
    "StoreOutcome", "StoredEntry", "StoredVectors", "TierCounts", "VectorCatchUp",
    "VectorQueue", "VectorSearch", "VectorStore", "digest", "owner_for", "scope_token",
    "stored_bytes",
]
