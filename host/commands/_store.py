"""What the store sub-commands share: the SQLite file of the config, and its quotas."""

from __future__ import annotations

from host.config import Config, mask_value
from host.store.sqlite_ops import Quotas

__all__ = ["quotas", "sqlite_path"]


def sqlite_path(config: Config, command: str) -> str:
    """The SQLite file `store.db` names. Raises `ValueError` for a database URL
    (`postgresql://...`): `command` works on SQLite files only."""
    db = config.store.db
    if "://" in db:
        raise ValueError(
            f"{command} works on a SQLite store; store.db is {mask_value(db)}"
            " (for PostgreSQL use its own tools, e.g. pg_dump)"
        )
    return db


def quotas(config: Config) -> Quotas:
    """The persisted-entry quotas of the config's limits."""
    limits = config.limits
    return Quotas(
        max_entries_per_namespace=limits.max_entries_per_namespace,
        max_entries_per_agent=limits.max_entries_per_agent,
    )
