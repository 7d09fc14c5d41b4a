"""`a2e-host vacuum`: rebuild the database file to give free pages back to the disk."""

from __future__ import annotations

import argparse
import os
import sqlite3
from typing import Any

from host.cli._progress import Progress, human_bytes
from host.cli._store import sqlite_path
from host.cli.main import add_db_args, config_from_args
from host.store.sqlite.admin import database_bytes, vacuum
from host.store.sqlite.files import check_file, explain

__all__ = ["register"]


def cmd_vacuum(args: argparse.Namespace) -> int:
    """VACUUM the store and print its size before and after.

    The progress shows the rebuilt pages as they reach the write-ahead log (the second half of
    SQLite's VACUUM; the first builds a copy out of sight), against the file's size."""
    path = sqlite_path(config_from_args(args), "vacuum")
    check_file(path, create=False)
    before = database_bytes(path)
    wal = path + "-wal"
    start = os.path.getsize(wal) if os.path.exists(wal) else 0
    with Progress("vacuum", os.path.getsize(path), unit="bytes") as bar:
        bar.watch(lambda: os.path.getsize(wal) - start)
        try:
            vacuum(path)
        except (sqlite3.Error, OSError) as exc:
            raise explain(path, exc) from None
        bar.advance(max(0, (bar.total or 0) - bar.done))
    print(f"vacuumed {path}: {human_bytes(before)} -> {human_bytes(database_bytes(path))}")
    return 0


def register(sub: Any) -> None:
    """Add the `vacuum` sub-command."""
    p = sub.add_parser(
        "vacuum", help="reclaim free space in the database file (writers wait meanwhile)"
    )
    add_db_args(p)
    p.set_defaults(func=cmd_vacuum)
