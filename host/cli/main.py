"""The `a2e-host` command line. Sub-commands register in `build_parser()`.

    a2e-host serve [--host H] [--port P] [--db PATH] [--config FILE]
    a2e-host stdio [--db PATH] [--config FILE]     one session over stdin/stdout (NDJSON)
    a2e-host rules load DIR --namespace NS [--db PATH] [--config FILE]
    a2e-host config check|show      a2e-host stats      a2e-host gc      a2e-host vacuum
    a2e-host export [--namespace NS] [--output FILE]    a2e-host import FILE|-
    a2e-host backup DEST
    a2e-host token new --agent NAME --namespace NS [--rights R,...]
    a2e-host mcp [--namespace NS] [--agent A] [--transport stdio|http] [--port P]

docs/cli.md has every command's help (generated from this parser). Settings come from, in
rising precedence: defaults, the `--config` file (or `$A2E_HOST_CONFIG`), `A2E_HOST_*`
environment variables, flags.

Each sub-command lives in its own module under `host/cli/` with a `register(subparsers)`
function, listed in `COMMANDS`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from host import __version__
from host.config import ENV_FILE, Config, load_config, mask_value
from host.extras import MissingExtra
from host.ops.logs import quiet_libraries
from host.ops.threads import limit_blas_threads, serve_command
from host.store.postgres.schema import explain_open_error

__all__ = [
    "COMMANDS",
    "add_db_args",
    "build_parser",
    "config_from_args",
    "config_path",
    "flag_overrides",
    "main",
    "run_loop",
]

# Sub-command modules under host/cli/; each has `register(subparsers)`.
COMMANDS: tuple[str, ...] = (
    "serve", "stdio", "rules", "mcp", "config", "stats", "gc", "export", "import_", "backup", "vacuum",
    "token",
    "reindex",
)

log = logging.getLogger("a2e_host")


def run_loop(coro: Any) -> Any:
    """Run `coro` on uvloop when installed, else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def config_path(args: argparse.Namespace) -> str | None:
    """The configuration file: `--config`, else the `A2E_HOST_CONFIG` variable, else none."""
    return getattr(args, "config", None) or os.environ.get(ENV_FILE) or None


def config_from_args(args: argparse.Namespace) -> Config:
    """The effective config: defaults < the file < `A2E_HOST_*` variables < the CLI flags given.

    Raises `ConfigError` naming a bad setting and where it came from.
    """
    return load_config(config_path(args), flag_overrides(args), os.environ)


def flag_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The settings the CLI flags of `args` set (only those given)."""
    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "log_level", None) is not None:
        overrides.setdefault("log", {})["level"] = args.log_level
    if getattr(args, "host", None) is not None:
        overrides.setdefault("server", {})["host"] = args.host
    if getattr(args, "port", None) is not None:
        overrides.setdefault("server", {})["port"] = args.port
    if getattr(args, "transport", None) is not None:
        overrides.setdefault("server", {})["transport"] = args.transport
    if getattr(args, "db", None) is not None:
        overrides.setdefault("store", {})["db"] = args.db
    return overrides


def add_db_args(p: argparse.ArgumentParser) -> None:
    """The `--db` and `--config` options every sub-command takes."""
    p.add_argument("--db", help="database: a SQLite file path or a postgresql:// URL"
                   " (default: store.db of the config)")
    p.add_argument("--config", help=f"TOML configuration file (default: ${ENV_FILE} if set)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = argparse.ArgumentParser(prog="a2e-host", description="The memory host for A2E agents.")
    parser.add_argument("--version", action="version", version=f"a2e-host {__version__}")
    parser.add_argument(
        "--log-level", help="DEBUG, INFO, WARNING or ERROR (default: log.level of the config)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(f"host.cli.{module}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `a2e-host` console script."""
    # before build_parser: the command modules import numpy (host.ops.threads says why)
    if serve_command(sys.argv[1:] if argv is None else argv, COMMANDS) == "serve":
        limit_blas_threads()
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level or "INFO").upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    quiet_libraries()  # no per-connection or CPU-build INFO lines
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ValidationError as err:
        print(f"a2e-host: invalid configuration:\n{err}", file=sys.stderr)
        return 2
    except (OSError, ValueError, MissingExtra) as err:
        print(f"a2e-host: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        # a PostgreSQL refusal from a command that opens its store on its own (`mcp`)
        said = explain_open_error(_db_of(args), err) if getattr(err, "sqlstate", None) else None
        if said is None:
            raise
        print(f"a2e-host: {said}", file=sys.stderr)
        return 2


def _db_of(args: argparse.Namespace) -> str:
    """The database the command works on, password masked (for a message)."""
    try:
        return mask_value(config_from_args(args).store.db)
    except Exception:  # noqa: BLE001 - a bad configuration was reported before this
        return "store.db"


if __name__ == "__main__":
    sys.exit(main())
