"""`a2e-host stats`: entries by namespace and tier, the embedding backlog, and the database's
size on disk."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from typing import Any

from host.cli._progress import human_bytes
from host.cli._store import open_admin, quotas
from host.cli.main import add_db_args, config_from_args, run_loop
from host.config import Config
from host.ops.usage import read_usage
from host.store.admin import NamespaceStats
from host.store.growth import UsageSummary

__all__ = ["register"]

_TOP = 10  # the fullest tenants `stats` lists


async def _stats(config: Config) -> tuple[str, list[NamespaceStats], int, int, UsageSummary | None]:
    async with open_admin(config, "stats") as admin:
        return (admin.where, await admin.stats(time.time()), await admin.database_bytes(),
                await admin.embed_backlog(), await read_usage(admin, quotas(config), _TOP))


def cmd_stats(args: argparse.Namespace) -> int:
    """Print live entries and content bytes by namespace and tier, and the database's size
    (the file on SQLite; the a2e_ tables with their indexes on PostgreSQL)."""
    path, rows, size, backlog, usage = run_loop(_stats(config_from_args(args)))
    if args.json:
        print(json.dumps({
            "database": path,
            "database_bytes": size,
            "entries": sum(r.entries for r in rows),
            "embed_backlog": backlog,
            "namespaces": [
                {"namespace": r.namespace, "tier": r.tier, "entries": r.entries,
                 "bytes": r.bytes} for r in rows
            ],
            "quota_usage": [asdict(u) for u in usage.top] if usage else [],
        }, indent=2))
        return 0
    width = max([len("namespace")] + [len(r.namespace) for r in rows])
    print(f"{'namespace':<{width}}  {'tier':<9} {'entries':>10} {'size':>10}")
    for r in rows:
        print(f"{r.namespace:<{width}}  {r.tier:<9} {r.entries:>10} {human_bytes(r.bytes):>10}")
    print(f"total entries: {sum(r.entries for r in rows)}")
    print(f"waiting for a vector (embedding backlog): {backlog}")
    print(f"database: {path} ({human_bytes(size)} on disk)")
    if usage and usage.top:  # the fullest tenants against their quotas (docs/growth.md)
        print(f"fullest against their quotas (at most {_TOP}):")
        for u in usage.top:
            who = f"{u.namespace} (namespace)" if not u.agent else f"{u.namespace} / {u.agent}"
            print(f"  {who}: {u.entries} of {u.max_entries} entries, {human_bytes(u.bytes)}"
                  f" of {human_bytes(u.max_bytes)} ({100 * u.fraction:.0f} %)")
    return 0


def register(sub: Any) -> None:
    """Add the `stats` sub-command."""
    p = sub.add_parser("stats", help="entries by namespace and tier, database size")
    add_db_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_stats)
