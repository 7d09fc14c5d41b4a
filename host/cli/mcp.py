"""`a2e-host mcp`: serve the memory as MCP tools, over stdio (default) or streamable HTTP.

    a2e-host mcp [--namespace NS] [--agent A] [--db PATH] [--config FILE]
    a2e-host mcp --transport http [--host H] [--port P] [--path /mcp] ...

It opens the configured SQLite store itself (no running host needed; a WebSocket host may use the
same file at the same time), acts as `--agent` in `--namespace` (defaults in the `[mcp]` config
section), and closes the store when the client disconnects (stdio: stdin closes) or on SIGTERM
or SIGINT. Over stdio, stdout carries only JSON-RPC; every log line goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from host.cli.main import add_db_args, config_path, flag_overrides, run_loop
from host.config import Config, load_config
from host.ops.logs import setup_logging

__all__ = ["register", "run_mcp"]

MISSING_SDK = (
    "a2e-host: the MCP server needs the `mcp` package; install it with"
    " pip install -e '.[mcp]' in the a2e-host checkout"
)


async def run_mcp(config: Config, path: str | Path | None = None) -> None:
    """Open the store, serve the tools on the configured transport, then close the store
    (`path`: the config file, re-read for the tokens on SIGHUP)."""
    from host.mcp.app import McpApp

    async with McpApp(config, config_path=path) as app:
        await app.serve()


_FLAGS = ("namespace", "agent", "transport", "host", "port", "path")


def _config(args: argparse.Namespace) -> Config:
    """Defaults < the config file < `A2E_HOST_*` variables < the flags (this command's own go
    to the `[mcp]` section)."""
    overrides = flag_overrides(args)
    overrides["mcp"] = {
        name: getattr(args, f"mcp_{name}")
        for name in _FLAGS
        if getattr(args, f"mcp_{name}", None) is not None
    }
    return load_config(config_path(args), overrides, os.environ)


def cmd_mcp(args: argparse.Namespace) -> int:
    """Run the MCP server until its client leaves or a signal stops it; 0 on a clean exit."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        print(MISSING_SDK, file=sys.stderr)
        return 2
    config = _config(args)
    setup_logging(config.log)  # stderr: over stdio, stdout is the protocol's
    try:
        run_loop(run_mcp(config, config_path(args)))
    except KeyboardInterrupt:
        pass
    return 0


def register(sub: Any) -> None:
    """Add the `mcp` sub-command."""
    p = sub.add_parser("mcp", help="serve the memory as MCP tools (stdio or streamable HTTP)")
    p.add_argument("--namespace", dest="mcp_namespace", metavar="NS",
                   help="namespace the tools act in (default: [mcp] namespace, 'default')")
    p.add_argument("--agent", dest="mcp_agent", metavar="AGENT",
                   help="agent identity the tools act as (default: [mcp] agent, 'default')")
    p.add_argument("--transport", dest="mcp_transport", choices=("stdio", "http"),
                   help="stdio (default) or http (streamable HTTP)")
    p.add_argument("--host", dest="mcp_host", metavar="H", help="HTTP address to bind (default 127.0.0.1)")
    p.add_argument("--port", dest="mcp_port", metavar="P", type=int,
                   help="HTTP port (default 8766; 0 = any free port)")
    p.add_argument("--path", dest="mcp_path", metavar="PATH", help="HTTP endpoint path (default /mcp)")
    add_db_args(p)
    p.set_defaults(func=cmd_mcp)
