"""`a2e-host backup DEST`: a consistent copy of the database, taken while the host serves."""

from __future__ import annotations

import argparse
import os
import sqlite3
from typing import Any

from host.cli._progress import Progress, human_bytes
from host.cli._store import sqlite_path
from host.cli.main import add_db_args, config_from_args
from host.store.sqlite.admin import backup, database_bytes
from host.store.sqlite.files import UnusableDatabase, check_file, check_folder, explain

__all__ = ["register"]


def _check_dest(dest: str) -> None:
    """Raise `UnusableDatabase` for a DEST that names a folder or lies in no folder."""
    full = os.path.abspath(dest)
    if os.path.isdir(full):
        raise UnusableDatabase(f"{full} is a folder: name the backup file, e.g."
                               f" {os.path.join(full, 'a2e-host-backup.db')}")
    check_folder(full, "DEST")


def cmd_backup(args: argparse.Namespace) -> int:
    """Copy the store to DEST with SQLite's online backup API; DEST appears only when whole."""
    path = sqlite_path(config_from_args(args), "backup")
    check_file(path, create=False)
    _check_dest(args.dest)
    partial = args.dest + ".partial"  # what `backup` writes, renamed to DEST when checked
    with Progress("backup", os.path.getsize(path), unit="bytes") as bar:
        bar.watch(lambda: os.path.getsize(partial))
        try:
            backup(path, args.dest)
        except (sqlite3.Error, OSError) as exc:
            raise explain(args.dest, exc, "DEST") from None
        bar.advance(max(0, (bar.total or 0) - bar.done))
    print(f"backed up {path} to {args.dest} ({human_bytes(database_bytes(args.dest))})")
    return 0


def register(sub: Any) -> None:
    """Add the `backup` sub-command."""
    p = sub.add_parser("backup", help="copy the database while the host serves (online backup)")
    p.add_argument("dest", help="file to write the backup to (replaced if it exists)")
    add_db_args(p)
    p.set_defaults(func=cmd_backup)
