"""`a2e-host stdio`: one session over stdin and stdout, for agents that spawn the host.

One JSON message a line each way (NDJSON), as the A2E SDK's `SubprocessTransport` speaks:
`SubprocessTransport(["a2e-host", "stdio", "--db", path])`. Logs go to stderr only. At the
end of stdin, or on SIGTERM / SIGINT, the requests read are answered (within
`server.drain_timeout` on a signal), the store commits and closes, and the command exits 0.
No port is bound.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from host.cli.main import add_db_args, config_from_args, config_path, run_loop
from host.config import Config
from host.lifecycle import on_signals
from host.ops.logs import setup_logging

__all__ = ["register"]

log = logging.getLogger("a2e_host")


async def _stdio(config: Config, config_path: str | None = None) -> int:
    from host.app import Host
    from host.net.transport_stdio import serve_pipes

    host = Host(config, config_path=config_path)
    await host.start(listen=False)
    stop = asyncio.Event()
    try:
        with on_signals({signal.SIGTERM: stop.set, signal.SIGINT: stop.set}):
            conn = await serve_pipes(host.server, sys.stdin.buffer, sys.stdout.buffer)
            log.info("a2e-host serving one session on stdin/stdout (authentication %s)",
                     "on" if host.auth.enabled else "off")
            await conn.finished(stop)
    finally:
        await host.stop()
    return 0


def cmd_stdio(args: argparse.Namespace) -> int:
    """Serve one session over stdin/stdout until EOF or SIGTERM, then commit and exit 0."""
    config = config_from_args(args)
    setup_logging(config.log)
    return int(run_loop(_stdio(config, config_path(args))))


def register(sub: Any) -> None:
    """Add the `stdio` sub-command."""
    p = sub.add_parser("stdio", help="serve one session over stdin/stdout (NDJSON)")
    add_db_args(p)
    p.set_defaults(func=cmd_stdio)
