"""The `a2e-host` command line. Sub-commands register in `build_parser()`.

    a2e-host serve [--host H] [--port P] [--db PATH] [--config FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from host.config import Config, load_config

__all__ = ["main", "build_parser", "config_from_args", "run_loop"]

log = logging.getLogger("a2e_host")


def run_loop(coro: Any) -> Any:
    """Run `coro` on uvloop when installed, else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def config_from_args(args: argparse.Namespace) -> Config:
    """The effective config: the file (if `--config`), then the CLI flags given."""
    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "host", None) is not None:
        overrides.setdefault("server", {})["host"] = args.host
    if getattr(args, "port", None) is not None:
        overrides.setdefault("server", {})["port"] = args.port
    if getattr(args, "db", None) is not None:
        overrides.setdefault("store", {})["db"] = args.db
    return load_config(getattr(args, "config", None), overrides)


async def _serve(config: Config) -> int:
    from host.app import Host

    host = Host(config)
    await host.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("signal received; draining")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await host.stop()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the host until SIGTERM or SIGINT, then drain, commit and exit 0."""
    return int(run_loop(_serve(config_from_args(args))))


def _add_db_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="SQLite database file (default ./a2e-host.db)")
    p.add_argument("--config", help="TOML configuration file")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = argparse.ArgumentParser(prog="a2e-host", description="The memory host for A2E agents.")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the WebSocket host")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to bind (default 8765; 0 = any free port)")
    _add_db_args(p)
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `a2e-host` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("websockets").setLevel(logging.WARNING)  # no per-connection INFO lines
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ValidationError as err:
        print(f"a2e-host: invalid configuration:\n{err}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as err:
        print(f"a2e-host: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
