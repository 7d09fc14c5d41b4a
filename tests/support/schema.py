"""An older SQLite schema, for the tests of its migration: a database as version N of the host
left it, before the later migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from host.store.sqlite.bm25 import row_length
from host.store.sqlite.schema import MIGRATIONS, connect

__all__ = ["schema_at"]


def schema_at(path: Path | str, version: int) -> sqlite3.Connection:
    """A new SQLite database at `path` of schema `version` (its first `version` migrations and
    `user_version`), open, with the `a2e_row_length` function the host registers on its
    connections (the keyword triggers of the later schemas call it)."""
    conn = connect(str(path))
    conn.create_function("a2e_row_length", 1, row_length, deterministic=True)
    conn.executescript("\n".join(MIGRATIONS[:version]) + f"\nPRAGMA user_version = {version};")
    return conn
