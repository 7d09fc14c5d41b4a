"""What the store sub-commands share: the SQLite file or PostgreSQL store of the config, and
its quotas."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from host.app import quotas_of as quotas
from host.config import Config, mask_value
from host.store.postgres.store import PostgresEntryStore

__all__ = ["open_postgres", "quotas", "sqlite_path"]


def sqlite_path(config: Config, command: str) -> str:
    """The SQLite file `store.db` names. Raises `ValueError` for a database URL
    (`postgresql://...`): `command` works on SQLite files only."""
    db = config.store.db
    if "://" in db:
        raise ValueError(
            f"{command} works on a SQLite store; store.db is {mask_value(db)}"
            " (for PostgreSQL use its own tools, e.g. pg_dump)"
        )
    return db


@asynccontextmanager
async def open_postgres(config: Config) -> AsyncIterator[PostgresEntryStore]:
    """The PostgreSQL store `store.db` names, open (schema migrated) with a small pool."""
    store = PostgresEntryStore(config.store.db, quotas=quotas(config), pool_min=1, pool_max=2)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
