"""The PostgreSQL store's change log (`host.store.changes.ChangeLog`): read from
`a2e_changes` / `a2e_change_heads`, written by the triggers and the logged write functions
(`functions/changes.sql`), announced by NOTIFY on `a2e_changes`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from host.store.postgres.sql import StoreState
from host.store.records import Change

__all__ = ["Changes"]


class Changes(StoreState):
    """`ChangeLog` on the store's pool."""

    async def change_head(self, namespace: str) -> int:
        """The newest change of `namespace` (at least its floor)."""
        return int(await self.pool.fetchval(
            "SELECT coalesce((SELECT seq FROM a2e_change_heads WHERE namespace = $1), 0)",
            namespace))

    async def change_heads(self, namespaces: Sequence[str]) -> dict[str, int]:
        """`change_head` of each namespace, in one query."""
        rows = await self.pool.fetch(
            "SELECT namespace, seq FROM a2e_change_heads WHERE namespace = ANY($1::text[])",
            list(namespaces))
        heads = dict.fromkeys(namespaces, 0)
        heads.update((r[0], int(r[1])) for r in rows)
        return heads

    async def change_floor(self, namespace: str) -> int:
        """The highest change pruned from `namespace`."""
        return int(await self.pool.fetchval(
            "SELECT coalesce((SELECT floor FROM a2e_change_heads WHERE namespace = $1), 0)",
            namespace))

    async def changes_after(self, namespace: str, after: int, limit: int,
                            max_bytes: int = 0) -> list[Change]:
        """Up to `limit` changes of `namespace` after `after`, in order; with `max_bytes`,
        none after the one that takes their entries to that many bytes."""
        if max_bytes:
            rows = await self.pool.fetch(
                "SELECT seq, op, entries FROM (SELECT seq, op, entries, sum(octet_length(entries))"
                " OVER (ORDER BY seq) - octet_length(entries) AS before FROM a2e_changes"
                " WHERE namespace = $1 AND seq > $2 ORDER BY seq LIMIT $3) c"
                " WHERE before < $4 ORDER BY seq", namespace, after, limit, max_bytes)
        else:
            rows = await self.pool.fetch(
                "SELECT seq, op, entries FROM a2e_changes WHERE namespace = $1 AND seq > $2"
                " ORDER BY seq LIMIT $3", namespace, after, limit)
        return [Change(int(r[0]), r[1], r[2].encode()) for r in rows]

    async def listen_changes(self, notify: Callable[[str], None]) -> None:
        """Call `notify(namespace)` ("" = any) when a change commits, through any host:
        LISTEN on `a2e_changes` over a connection of its own (closed by `close()`)."""
        import asyncpg

        conn = await asyncpg.connect(self.url, server_settings={"application_name": "a2e-host"})
        await conn.add_listener("a2e_changes", lambda _c, _pid, _ch, payload: notify(payload))
        self._listener = conn

    async def prune_changes(self, before: float, max_rows: int) -> int:
        """Delete changes older than `before` or past `max_rows` a namespace."""
        return int(await self.pool.fetchval("SELECT a2e_prune_changes($1, $2)", before,
                                            max_rows))

