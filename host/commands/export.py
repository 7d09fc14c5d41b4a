"""`a2e-host export`: write live entries as JSON Lines (see `host.transfer`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Any

import msgspec

from host.cli import add_db_args, config_from_args
from host.commands._progress import Progress
from host.commands._store import sqlite_path
from host.store.sqlite_admin import export_rows, open_store_file
from host.transfer import ExportedEntry, encode_line

__all__ = ["register"]


def _write(out: IO[bytes], rows: Any, bar: Progress) -> int:
    n = 0
    for r in rows:
        line = encode_line(ExportedEntry(
            namespace=r.namespace, tier=r.tier, owner=r.owner, agent=r.agent,
            key=msgspec.Raw(r.key.encode()), content=msgspec.Raw(r.content.encode()),
            tags=msgspec.Raw(r.tags.encode()), source=r.source, score=r.score, ttl=r.ttl,
            created_at=r.created_at, updated_at=r.updated_at,
        ))
        out.write(line)
        out.write(b"\n")
        n += 1
        bar.advance()
    return n


def cmd_export(args: argparse.Namespace) -> int:
    """Export one snapshot of the live entries (of one namespace with --namespace)."""
    conn = open_store_file(sqlite_path(config_from_args(args), "export"))
    try:
        total, rows = export_rows(conn, time.time(), args.namespace)
        with Progress("export", total) as bar:
            if args.output in (None, "-"):
                n = _write(sys.stdout.buffer, rows, bar)
                sys.stdout.buffer.flush()
            else:
                with open(args.output, "wb") as fh:
                    n = _write(fh, rows, bar)
    finally:
        conn.close()
    print(f"exported {n} entries", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add the `export` sub-command."""
    p = sub.add_parser("export", help="write entries as JSON Lines (embeddings excluded)")
    p.add_argument("--namespace", help="export only this namespace")
    p.add_argument("--output", "-o", help="file to write (default: standard output)")
    add_db_args(p)
    p.set_defaults(func=cmd_export)
