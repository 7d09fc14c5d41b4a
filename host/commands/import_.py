"""`a2e-host import FILE|-`: upsert entries from JSON Lines, keeping their timestamps.

Idempotent: an entry is addressed by (namespace, tier, owner, key), so importing a file twice
leaves the same entries. Writes go through the wire path's `put_entries`, a transaction per
batch, so a concurrent host keeps serving; quotas apply as to any write.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import IO, Any

import msgspec

from host.cli import add_db_args, config_from_args
from host.commands._progress import Progress
from host.commands._store import quotas, sqlite_path
from host.store.base import NewEntry, Scope
from host.store.sqlite_admin import import_batch, open_store_file
from host.transfer import decode_line

__all__ = ["register", "BATCH"]

BATCH = 500  # entries a transaction


def _entries(src: IO[bytes], bar: Progress) -> Any:
    for number, line in enumerate(src, start=1):
        bar.advance(len(line))
        if not line.strip():
            continue
        try:
            e = decode_line(line)
            key = e.canonical_key()
        except ValueError as err:
            raise ValueError(f"line {number}: {err}") from None
        tags = e.tags if isinstance(e.tags, list) else msgspec.json.decode(e.tags)
        yield Scope(e.namespace, e.writer()), NewEntry(
            tier=e.tier, key=key, content=bytes(e.content), tags=list(tags), source=e.source,
            score=e.score, ttl=e.ttl, created_at=e.created_at, updated_at=e.updated_at,
        )


def cmd_import(args: argparse.Namespace) -> int:
    """Import FILE (or standard input for `-`); print how many were stored or refused."""
    config = config_from_args(args)
    path = sqlite_path(config, "import")
    q = quotas(config)
    src: IO[bytes]
    if args.file == "-":
        src, total = sys.stdin.buffer, None
    else:
        src, total = open(args.file, "rb"), os.path.getsize(args.file)
    conn = open_store_file(path, create=True)
    stored = refused = 0
    try:
        with Progress("import (bytes)", total) as bar:
            batch: list[tuple[Scope, NewEntry]] = []
            for item in _entries(src, bar):
                batch.append(item)
                if len(batch) >= BATCH:
                    out = import_batch(conn, batch, time.time(), q)
                    refused += sum(o is not None for o in out)
                    stored += sum(o is None for o in out)
                    batch = []
            if batch:
                out = import_batch(conn, batch, time.time(), q)
                refused += sum(o is not None for o in out)
                stored += sum(o is None for o in out)
    finally:
        conn.close()
        if src is not sys.stdin.buffer:
            src.close()
    print(f"imported {stored} entries" + (f"; {refused} refused by quotas" if refused else ""),
          file=sys.stderr)
    return 1 if refused else 0


def register(sub: Any) -> None:
    """Add the `import` sub-command."""
    p = sub.add_parser("import", help="upsert entries from JSON Lines (idempotent)")
    p.add_argument("file", help="export file to read, or - for standard input")
    add_db_args(p)
    p.set_defaults(func=cmd_import)
