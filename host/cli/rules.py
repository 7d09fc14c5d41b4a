"""`a2e-host rules load DIR --namespace NS`: store a rules folder as procedural memory.

Opens the configured store directly (no WebSocket, no running host needed; SQLite's locking
lets it run beside a host on the same file), replaces the namespace's rules with the folder's,
prints a summary on stdout and one line a problem on stderr. Exit status: 0 when every file
loaded, 1 when some were skipped (the others are stored), 2 for a bad folder or configuration.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from host.cli.main import add_db_args, config_from_args, run_loop
from host.config import Config
from host.rules.sync import LoadReport, load_into_store

__all__ = ["register", "run_load"]


async def run_load(config: Config, root: str, namespace: str) -> LoadReport:
    """Open the configured store, load `root` into `namespace`, close the store."""
    from host.app import make_store, open_store

    store = make_store(config)
    await open_store(store, config)
    try:
        return await load_into_store(store, namespace, root, config)
    finally:
        await store.close()


def cmd_rules_load(args: argparse.Namespace) -> int:
    """Run `rules load`; see the module docstring for output and exit status."""
    if not args.namespace:
        print("a2e-host: --namespace must not be empty", file=sys.stderr)
        return 2
    report: LoadReport = run_loop(run_load(config_from_args(args), args.dir, args.namespace))
    for problem in report.problems:
        print(f"a2e-host: skipped {problem}", file=sys.stderr)
    print(
        f"loaded {report.stored} rules from {len(report.files)} files into namespace"
        f" {report.namespace!r}; removed {report.removed} stale rules;"
        f" {len(report.problems)} problems"
    )
    return 1 if report.problems else 0


def register(sub: Any) -> None:
    """Add the `rules` sub-command and its `load` action."""
    p = sub.add_parser("rules", help="load .cursorrules guidance as procedural memory")
    actions = p.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    load = actions.add_parser(
        "load",
        help="store a rules folder in a namespace's semantic tier, replacing its old rules",
    )
    load.add_argument("dir", metavar="DIR", help="the rules root (see docs/rules.md)")
    load.add_argument("--namespace", required=True, help="the namespace to store the rules in")
    add_db_args(load)
    load.set_defaults(func=cmd_rules_load)
