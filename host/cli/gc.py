"""`a2e-host gc`: delete every expired entry now (one collection), then exit."""

from __future__ import annotations

import argparse
import time
from typing import Any

from host.cli._store import open_admin
from host.cli.main import add_db_args, config_from_args, run_loop
from host.config import Config

__all__ = ["register"]


async def _gc(config: Config) -> int:
    async with open_admin(config, "gc") as admin:
        return await admin.collect_garbage(time.time())


def cmd_gc(args: argparse.Namespace) -> int:
    """Collect expired entries of the store and print how many were deleted. On PostgreSQL
    this takes the hosts' GC lock: nothing is deleted while a host is collecting."""
    print(f"deleted {run_loop(_gc(config_from_args(args)))} expired entries")
    return 0


def register(sub: Any) -> None:
    """Add the `gc` sub-command."""
    p = sub.add_parser("gc", help="delete expired entries now (one collection)")
    add_db_args(p)
    p.set_defaults(func=cmd_gc)
