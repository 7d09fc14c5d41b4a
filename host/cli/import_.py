"""`a2e-host import FILE|-`: upsert entries from JSON Lines, keeping their timestamps.

Idempotent: an entry is addressed by (namespace, tier, owner, key), so importing a file twice
leaves the same entries. Writes go through the wire path's `put_entries`, a transaction per
batch (on PostgreSQL the wire path's `PostgresEntryStore.put`, a transaction per run of one
scope), so a concurrent host keeps serving; quotas apply as to any write.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

import msgspec
from msgspec import UnsetType

from host.cli._progress import Progress
from host.cli._store import open_admin
from host.cli.main import add_db_args, config_from_args, run_loop
from host.cli.transfer import decode_line
from host.config import Config
from host.store.records import NewEntry, Scope, StoreOutcome
from protocol.validity import window

__all__ = ["register", "BATCH"]

BATCH = 500  # entries a transaction


def _given(value: float | UnsetType | None) -> float | None:
    """A line's bound (the time extension): None when absent."""
    return None if isinstance(value, UnsetType) else value


def _entries(src: IO[bytes], bar: Progress) -> Any:
    for number, line in enumerate(src, start=1):
        bar.advance(len(line))
        if not line.strip():
            continue
        try:
            e = decode_line(line)
            key = e.canonical_key()
            valid_from, valid_until = window(_given(e.valid_from), _given(e.valid_until))
        except ValueError as err:
            raise ValueError(f"line {number}: {err}") from None
        tags = e.tags if isinstance(e.tags, list) else msgspec.json.decode(e.tags)
        yield Scope(e.namespace, e.writer()), NewEntry(
            tier=e.tier, key=key, content=bytes(e.content), tags=list(tags), source=e.source,
            score=e.score, ttl=e.ttl, created_at=e.created_at, updated_at=e.updated_at,
            valid_from=valid_from, valid_until=valid_until,
        )


def _batches(src: IO[bytes], bar: Progress) -> Iterator[list[tuple[Scope, NewEntry]]]:
    batch: list[tuple[Scope, NewEntry]] = []
    for item in _entries(src, bar):
        batch.append(item)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


async def _import(config: Config, src: IO[bytes], bar: Progress) -> list[StoreOutcome]:
    outcomes: list[StoreOutcome] = []
    async with open_admin(config, "import", create=True) as admin:
        for batch in _batches(src, bar):
            outcomes += await admin.import_batch(batch, time.time())
    return outcomes


def cmd_import(args: argparse.Namespace) -> int:
    """Import FILE (or standard input for `-`); print how many were stored or refused."""
    config = config_from_args(args)
    src: IO[bytes]
    if args.file == "-":
        src, total = sys.stdin.buffer, None
    else:
        src, total = open(args.file, "rb"), os.path.getsize(args.file)
    try:
        with Progress("import", total, unit="bytes") as bar:
            outcomes = run_loop(_import(config, src, bar))
    finally:
        if src is not sys.stdin.buffer:
            src.close()
    stored = sum(o is None for o in outcomes)
    refused = len(outcomes) - stored
    print(f"imported {stored} entries" + (f"; {refused} refused by quotas" if refused else ""),
          file=sys.stderr)
    return 1 if refused else 0


def register(sub: Any) -> None:
    """Add the `import` sub-command."""
    p = sub.add_parser("import", help="upsert entries from JSON Lines (idempotent)")
    p.add_argument("file", help="export file to read, or - for standard input")
    add_db_args(p)
    p.set_defaults(func=cmd_import)
