"""`a2e-host vacuum`: rebuild the database file to give free pages back to the disk."""

from __future__ import annotations

import argparse
from typing import Any

from host.cli._store import sqlite_path
from host.cli.main import add_db_args, config_from_args
from host.store.sqlite.admin import database_bytes, vacuum

__all__ = ["register"]


def cmd_vacuum(args: argparse.Namespace) -> int:
    """VACUUM the store and print its size before and after."""
    path = sqlite_path(config_from_args(args), "vacuum")
    before = database_bytes(path)
    vacuum(path)
    print(f"vacuumed {path}: {before} -> {database_bytes(path)} bytes")
    return 0


def register(sub: Any) -> None:
    """Add the `vacuum` sub-command."""
    p = sub.add_parser(
        "vacuum", help="reclaim free space in the database file (writers wait meanwhile)"
    )
    add_db_args(p)
    p.set_defaults(func=cmd_vacuum)
