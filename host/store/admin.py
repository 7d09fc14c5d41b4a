"""The operator tasks of the CLI (`stats`, `export`, `import`, `gc`), the same on every backend:
`StoreAdmin` (`host.store.sqlite.admin.SQLiteAdmin`, `host.store.postgres.admin.PostgresAdmin`;
`host.cli._store.open_admin` picks one), so a command never branches on the backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from host.store.records import NewEntry, Quotas, Scope, StoreOutcome

if TYPE_CHECKING:
    from host.store.growth import UsageSummary

__all__ = ["ExportRow", "NamespaceStats", "StoreAdmin"]


@dataclass(frozen=True, slots=True)
class NamespaceStats:
    """Live entries and their content bytes in one (namespace, tier)."""

    namespace: str
    tier: str
    entries: int
    bytes: int


@dataclass(frozen=True, slots=True)
class ExportRow:
    """One live entry as exported. `key` and `content` are JSON text, as stored."""

    namespace: str
    tier: str
    owner: str
    agent: str
    key: str
    content: str
    tags: str  # JSON array text
    source: str
    score: float
    ttl: int
    created_at: float
    updated_at: float
    valid_from: float | None = None  # when the fact holds (the time extension)
    valid_until: float | None = None


class StoreAdmin(Protocol):
    """The operator tasks of the CLI's `stats`, `export`, `import` and `gc` on one store.
    Backup and vacuum are SQLite's alone."""

    where: str  # the database as shown to the operator: the file, or the URL, password masked

    async def stats(self, now: float) -> list[NamespaceStats]:
        """Live entries and content bytes by namespace and tier, by namespace then tier."""

    async def database_bytes(self) -> int:
        """What the store takes on disk."""

    async def embed_backlog(self) -> int:
        """Entries waiting for a vector (the embedding queue)."""

    async def collect_garbage(self, now: float) -> int:
        """Delete every entry expired at `now`; how many."""

    def export_rows(
        self, now: float, namespace: str | None = None
    ) -> AbstractAsyncContextManager[tuple[int, AsyncIterator[ExportRow]]]:
        """`async with admin.export_rows(now) as (total, rows)`: how many live entries (of one
        namespace if given) and an async iterator of them in id order, one snapshot."""

    async def import_batch(
        self, batch: Sequence[tuple[Scope, NewEntry]], now: float
    ) -> list[StoreOutcome]:
        """Upsert `batch` keeping each entry's timestamps; one outcome per entry, in order."""

    async def quota_usage(self, quotas: Quotas, top: int) -> UsageSummary | None:
        """Tenants by usage fraction and the `top` fullest (`EntryStore.quota_usage`)."""
