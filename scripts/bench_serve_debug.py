"""`a2e-host serve` in asyncio debug mode, for `bench_host.py --loop-debug MS`.

Every callback or task step that holds the event loop longer than MS milliseconds is logged by
asyncio ("Executing <...> took 0.012 seconds") on stderr: the blocking calls on the loop.
Debug mode slows the host down; its throughput figures are not the host's.

    python scripts/bench_serve_debug.py 5 serve --port 8765 --db /tmp/x.db
"""

from __future__ import annotations

import asyncio
import logging
import sys

from host.cli.main import build_parser, config_from_args, config_path, run_loop
from host.cli.serve import _serve

__all__ = ["main"]


def main() -> int:
    """Serve like `a2e-host serve`, with the loop in debug mode at the given threshold."""
    slow = float(sys.argv[1]) / 1000
    args = build_parser().parse_args(sys.argv[2:])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")

    async def run() -> int:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = slow
        return await _serve(config_from_args(args), config_path(args),
                            lambda: config_from_args(args))

    return int(run_loop(run()))


if __name__ == "__main__":
    sys.exit(main())
