"""`a2e-host gc`: delete every expired entry now (one collection), then exit."""

from __future__ import annotations

import argparse
import time
from typing import Any

from host.cli import add_db_args, config_from_args
from host.commands._store import sqlite_path
from host.store.sqlite_admin import collect_all_expired, open_store_file

__all__ = ["register"]


def cmd_gc(args: argparse.Namespace) -> int:
    """Collect expired entries of the store and print how many were deleted."""
    conn = open_store_file(sqlite_path(config_from_args(args), "gc"))
    try:
        n = collect_all_expired(conn, time.time())
    finally:
        conn.close()
    print(f"deleted {n} expired entries")
    return 0


def register(sub: Any) -> None:
    """Add the `gc` sub-command."""
    p = sub.add_parser("gc", help="delete expired entries now (one collection)")
    add_db_args(p)
    p.set_defaults(func=cmd_gc)
