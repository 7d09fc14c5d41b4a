"""`a2e-host reindex`: compute the vectors of every entry now, with a progress bar.

The running host re-embeds in the background by itself (after each store, and for every entry
when the embedder changed); this command does it on demand, for instance after an import or to
finish before serving. Without `--all` it embeds only the entries whose vector is missing or
stale; with `--all` it recomputes every vector. On PostgreSQL it claims entries from the shared
queue like a host's worker, so it can run while the hosts serve.
"""

from __future__ import annotations

import argparse
from typing import Any

from host.app import make_store, open_store
from host.cli._progress import Progress
from host.cli.main import add_db_args, config_from_args, run_loop
from host.search.embed import make_embedder
from host.search.engine import SearchEngine

__all__ = ["register"]


async def _reindex(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    embedder = make_embedder(config.search)
    if embedder is None:
        print("search.embedder is 'none': there are no vectors to compute")
        return 0
    # SQLite (which must exist), or PostgreSQL (claims as a host's worker does)
    store = make_store(config, create=False)
    await open_store(store, config)
    engine = SearchEngine(store, embedder, config.search)
    try:
        await engine.start(worker=False)
        if args.all:
            await store.requeue_vectors()
        with Progress("reindex", await store.vector_queue()) as bar:
            done = await engine.drain(lambda n, _left: bar.advance(n - bar.done))
    finally:
        await engine.stop()
        await store.close()
    print(f"embedded {done} entries with {embedder.name}")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    """Embed the queued (or, with --all, every) entry of the store and print the count."""
    return int(run_loop(_reindex(args)))


def register(sub: Any) -> None:
    """Add the `reindex` sub-command."""
    p = sub.add_parser("reindex", help="compute missing or stale vectors now (--all: every one)")
    add_db_args(p)
    p.add_argument("--all", action="store_true", help="recompute every vector, not only stale ones")
    p.set_defaults(func=cmd_reindex)
