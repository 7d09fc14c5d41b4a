"""The `a2e-host` command line: `main.py` (the parser and its shared helpers) and one module a
sub-command (`serve.py`, `rules.py`, ... listed in `host.cli.main.COMMANDS`), with their helpers
(`_store.py`, `_progress.py`, `transfer.py`, `reference.py`)."""

from host.cli.main import main

__all__ = ["main"]
