"""`a2e-host serve`: run the WebSocket host until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from host.cli import add_db_args, config_from_args, config_path, run_loop
from host.config import Config

__all__ = ["register"]

log = logging.getLogger("a2e_host")


async def _serve(config: Config, config_path: str | None = None) -> int:
    from host.app import Host

    host = Host(config, config_path=config_path)
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
    return int(run_loop(_serve(config_from_args(args), config_path(args))))


def register(sub: Any) -> None:
    """Add the `serve` sub-command."""
    p = sub.add_parser("serve", help="run the WebSocket host")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to bind (default 8765; 0 = any free port)")
    add_db_args(p)
    p.set_defaults(func=cmd_serve)
