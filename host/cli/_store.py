"""What the store sub-commands share: the SQLite file or PostgreSQL store of the config, its
quotas, `open_admin`, the one place that picks the backend's `StoreAdmin`, and
`open_sqlite`, which checks a SQLite path before opening it (`files.check_file`)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from host.app import open_store
from host.app import quotas_of as quotas
from host.config import Config, mask_value
from host.store.admin import StoreAdmin
from host.store.postgres.admin import PostgresAdmin
from host.store.postgres.store import PostgresEntryStore, is_postgres_url
from host.store.sqlite.admin import SQLiteAdmin, open_store_file
from host.store.sqlite.files import FileState, check_file, explain, remove_files

__all__ = ["open_admin", "open_postgres", "open_sqlite", "quotas", "sqlite_path"]


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


def open_sqlite(path: str, create: bool = False) -> sqlite3.Connection:
    """The store file at `path`, checked (`UnusableDatabase` naming the path and the fix for
    a folder, a file not SQLite, another application's database, a missing one unless
    `create`, a folder the file cannot be written in), open with its schema migrated. A file
    created here is removed again when opening it fails."""
    found = check_file(path, create=create)
    try:
        return open_store_file(path, create=True)
    except (sqlite3.Error, OSError) as exc:
        if found is FileState.ABSENT:
            remove_files(path)
        raise explain(path, exc) from None


@asynccontextmanager
async def open_postgres(config: Config) -> AsyncIterator[PostgresEntryStore]:
    """The PostgreSQL store `store.db` names, open (schema migrated) with a small pool."""
    store = PostgresEntryStore(config.store.db, quotas=quotas(config), pool_min=1, pool_max=2)
    await open_store(store, config)
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def open_admin(config: Config, command: str, create: bool = False) -> AsyncIterator[StoreAdmin]:
    """The operator tasks (`StoreAdmin`) on the store `store.db` names, open for the block:
    PostgreSQL for a `postgresql://` URL, else the SQLite file (which must exist unless
    `create`; another URL is refused with `ValueError`, naming `command`)."""
    if is_postgres_url(config.store.db):
        async with open_postgres(config) as store:
            yield PostgresAdmin(store, mask_value(config.store.db))
        return
    path = sqlite_path(config, command)
    conn = open_sqlite(path, create)
    try:
        yield SQLiteAdmin(conn, path, quotas(config))
    finally:
        conn.close()
