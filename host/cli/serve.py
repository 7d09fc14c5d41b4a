"""`a2e-host serve`: run the WebSocket host until SIGTERM or SIGINT; SIGHUP reloads.

On SIGTERM/SIGINT the host stops accepting, lets in-flight requests finish (up to
`server.drain_timeout`), commits, closes and exits 0. On SIGHUP it re-reads the configuration
(the file, the environment, the flags it started with) and applies the limits, the log
settings and the tokens to the running host without dropping connections; a wrong new setting
is logged and the running configuration stays.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

from host.cli.main import add_db_args, config_from_args, config_path, run_loop
from host.config import Config, ConfigError
from host.lifecycle import on_signals
from host.ops.logs import setup_logging

__all__ = ["register"]

log = logging.getLogger("a2e_host")

SWITCH_INTERVAL = 0.001  # seconds a thread holds the GIL while another waits for it


async def _serve(
    config: Config, config_path: str | None = None, reread: Callable[[], Config] | None = None,
    adopt: bool = False,
) -> int:
    from host.app import Host

    host = Host(config, config_path=config_path, adopt=adopt)
    await host.start()
    # what exists once started (modules, the model, the configuration: most of the objects the
    # cyclic collector tracks) is left out of its full passes, which otherwise walked it every
    # second or two under load and held every connection 30-45 ms (the p99 of queries)
    gc.freeze()
    # a thread running Python (a vector space's read: a million rows' row map, their checks)
    # hands the GIL to the loop only once the loop has waited a switch interval for it, and
    # the loop takes the GIL anew for each of uvloop's callbacks (a request is several): at
    # the default 5 ms a /healthz waited 140-410 ms behind a restart's read of a million rows
    # whose longest step held the GIL ~40 ms; at 1 ms, 28-41 ms (docs/benchmarks.md, "A host
    # that is building stays fast")
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    stop = asyncio.Event()

    def reload() -> None:
        try:
            new = reread() if reread is not None else config
        except ConfigError as err:
            log.error("reload refused; the running configuration stays: %s", err)
            return
        try:
            restart = host.reload(new)
        except ValueError as err:
            log.error("tokens not reloaded; the previous tokens stay: %s", err)
            return
        finally:
            setup_logging(host.config.log)
        log.info("configuration reloaded", extra={"restart_needed": restart} if restart else {})

    try:
        with on_signals({signal.SIGTERM: stop.set, signal.SIGINT: stop.set,
                         signal.SIGHUP: reload}):
            await stop.wait()
            log.info("signal received; draining")
    finally:
        await host.stop()
        gc.unfreeze()
        sys.setswitchinterval(switch)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the host until SIGTERM or SIGINT, then drain, commit and exit 0."""
    config = config_from_args(args)
    setup_logging(config.log)
    return int(run_loop(_serve(config, config_path(args), lambda: config_from_args(args),
                               adopt=args.adopt)))


def register(sub: Any) -> None:
    """Add the `serve` sub-command."""
    p = sub.add_parser("serve", help="run the WebSocket host")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to bind (default 8765; 0 = any free port)")
    p.add_argument("--transport", choices=("websockets", "picows"),
                   help="WebSocket library (default websockets; picows: Cython framing)")
    p.add_argument("--adopt", action="store_true",
                   help="use a SQLite file that holds another application's tables: add the"
                   " host's tables beside them (refused without this flag)")
    add_db_args(p)
    p.set_defaults(func=cmd_serve)
