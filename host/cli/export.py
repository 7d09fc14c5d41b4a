"""`a2e-host export`: write live entries as JSON Lines (see `host.cli.transfer`)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import msgspec
from msgspec import UNSET

from host.cli._progress import Progress
from host.cli._store import open_admin
from host.cli.main import add_db_args, config_from_args, run_loop
from host.cli.transfer import ExportedEntry, encode_line
from host.config import Config
from host.store.admin import ExportRow

__all__ = ["line_of", "register"]


def line_of(r: ExportRow) -> bytes:
    """The export line of one row, newline included."""
    return encode_line(ExportedEntry(
        namespace=r.namespace, tier=r.tier, owner=r.owner, agent=r.agent,  # type: ignore[arg-type]
        key=msgspec.Raw(r.key.encode()), content=msgspec.Raw(r.content.encode()),
        tags=msgspec.Raw(r.tags.encode()), source=r.source, score=r.score, ttl=r.ttl,
        created_at=r.created_at, updated_at=r.updated_at,
        valid_from=UNSET if r.valid_from is None else r.valid_from,
        valid_until=UNSET if r.valid_until is None else r.valid_until,
    )) + b"\n"


async def _export(config: Config, args: argparse.Namespace) -> int:
    async with open_admin(config, "export") as admin, \
            admin.export_rows(time.time(), args.namespace) as (total, rows):
        n = 0
        with Progress("export", total) as bar, _output(args.output) as out:
            async for r in rows:
                out.write(line_of(r))
                n += 1
                bar.advance()
    return n


@contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    """The file to write (standard output for None or "-"), flushed or closed after."""
    if path in (None, "-"):
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
    else:
        with open(path, "wb") as fh:
            yield fh


def cmd_export(args: argparse.Namespace) -> int:
    """Export one snapshot of the live entries (of one namespace with --namespace)."""
    n = run_loop(_export(config_from_args(args), args))
    print(f"exported {n} entries", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add the `export` sub-command."""
    p = sub.add_parser("export", help="write entries as JSON Lines (embeddings excluded)")
    p.add_argument("--namespace", help="export only this namespace")
    p.add_argument("--output", "-o", help="file to write (default: standard output)")
    add_db_args(p)
    p.set_defaults(func=cmd_export)
