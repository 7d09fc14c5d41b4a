"""`a2e-host gc`: delete every expired entry now (one collection), then exit."""

from __future__ import annotations

import argparse
import time
from typing import Any

from host.cli._store import open_postgres, sqlite_path
from host.cli.main import add_db_args, config_from_args, run_loop
from host.config import Config
from host.store.postgres.store import is_postgres_url
from host.store.sqlite.admin import collect_all_expired, open_store_file

__all__ = ["register"]


async def _gc_postgres(config: Config) -> int:
    async with open_postgres(config) as store:
        return await store.collect_garbage(time.time())


def cmd_gc(args: argparse.Namespace) -> int:
    """Collect expired entries of the store and print how many were deleted. On PostgreSQL
    this takes the hosts' GC lock: nothing is deleted while a host is collecting."""
    config = config_from_args(args)
    if is_postgres_url(config.store.db):
        print(f"deleted {run_loop(_gc_postgres(config))} expired entries")
        return 0
    conn = open_store_file(sqlite_path(config, "gc"))
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
