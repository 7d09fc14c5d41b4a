"""`a2e-host backup DEST`: a consistent copy of the database, taken while the host serves."""

from __future__ import annotations

import argparse
from typing import Any

from host.cli._progress import Progress
from host.cli._store import sqlite_path
from host.cli.main import add_db_args, config_from_args
from host.store.sqlite.admin import backup, database_bytes

__all__ = ["register"]


def cmd_backup(args: argparse.Namespace) -> int:
    """Copy the store to DEST with SQLite's online backup API; DEST appears only when whole."""
    path = sqlite_path(config_from_args(args), "backup")
    with Progress("backup (pages)", None) as bar:
        backup(path, args.dest, lambda done, _total: bar.advance(done - bar.done))
    print(f"backed up {path} to {args.dest} ({database_bytes(args.dest)} bytes)")
    return 0


def register(sub: Any) -> None:
    """Add the `backup` sub-command."""
    p = sub.add_parser("backup", help="copy the database while the host serves (online backup)")
    p.add_argument("dest", help="file to write the backup to (replaced if it exists)")
    add_db_args(p)
    p.set_defaults(func=cmd_backup)
