"""The memory browser's reads on PostgreSQL (`host.store.interface.EntryStore`), the SQL of
`host.store.sqlite.browse` in PostgreSQL's dialect, over the store's asyncpg pool.

Like the SQLite ones they cross the agents of a namespace (an operator's view, reached only
through `host.ui`, which decides who may see which namespace).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from host.store.records import BrowsedEntry, BrowseFilter, NamespaceOverview

__all__ = ["browse", "browse_entry", "export_namespace", "overview"]

_LIVE = "(e.expires_at IS NULL OR e.expires_at > $1)"
_COLUMNS = (
    "e.id, e.tier, e.owner, e.agent, e.key, e.content, e.tags, e.source, e.score, e.ttl,"
    " e.created_at, e.updated_at,"
    " CASE WHEN EXISTS (SELECT 1 FROM a2e_embed_queue q WHERE q.entry_id = e.id) THEN 'queued'"
    " WHEN EXISTS (SELECT 1 FROM a2e_vectors v WHERE v.entry_id = e.id) THEN 'written'"
    " ELSE 'none' END, e.valid_from, e.valid_until"
)


def _entry(r: Any) -> BrowsedEntry:
    return BrowsedEntry(
        id=int(r[0]), tier=r[1], owner=r[2], agent=r[3], key=r[4].encode(),
        content=r[5].encode(), tags=list(r[6]), source=r[7], score=r[8], ttl=int(r[9]),
        created_at=r[10], updated_at=r[11], vector=r[12], valid_from=r[13],
        valid_until=r[14],
    )


async def overview(pool: Any, namespaces: Sequence[str] | None, now: float
                   ) -> list[NamespaceOverview]:
    """The namespaces with live entries (those of `namespaces` only, unless None), by name."""
    if namespaces is not None and not namespaces:
        return []
    where, args = _LIVE, [now]
    if namespaces is not None:
        where += " AND e.namespace = ANY($2::text[])"
        args.append(list(namespaces))  # type: ignore[arg-type]
    rows = await pool.fetch(
        "SELECT e.namespace, e.tier, e.agent, count(*), coalesce(sum(e.size), 0)"
        f" FROM a2e_entries e WHERE {where} GROUP BY e.namespace, e.tier, e.agent", *args)
    backlog = {r[0]: int(r[1]) for r in await pool.fetch(
        "SELECT e.namespace, count(*) FROM a2e_embed_queue q JOIN a2e_entries e"
        f" ON e.id = q.entry_id WHERE {where} GROUP BY e.namespace", *args)}
    by_ns: dict[str, tuple[dict[str, int], dict[str, dict[str, int]], list[int]]] = {}
    for ns, tier, agent, n, size in rows:
        tiers, agents, total = by_ns.setdefault(ns, ({}, {}, [0]))
        tiers[tier] = tiers.get(tier, 0) + int(n)
        agents.setdefault(agent, {})[tier] = int(n)
        total[0] += int(size)
    return [NamespaceOverview(ns, tiers, agents, total[0], backlog.get(ns, 0))
            for ns, (tiers, agents, total) in sorted(by_ns.items())]


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def browse(pool: Any, namespace: str, f: BrowseFilter, now: float
                 ) -> tuple[list[BrowsedEntry], int]:
    """Live entries of `namespace` matching `f`, newest first: (the page, how many match)."""
    if not f.tiers:
        return [], 0
    args: list[Any] = [now, namespace, list(f.tiers)]
    where = f"{_LIVE} AND e.namespace = $2 AND e.tier = ANY($3::text[])"
    if f.agent:
        args.append(f.agent)
        where += f" AND e.agent = ${len(args)}"
    if f.key_text:
        args.append(_like(f.key_text))
        where += f" AND e.key LIKE ${len(args)} ESCAPE '\\'"
    if f.tags:
        args.append(list(dict.fromkeys(f.tags)))
        where += f" AND e.tags @> ${len(args)}::text[]"
    if f.as_of is not None:  # the entries valid then, by the rule of a read's `as_of`
        args.append(f.as_of)
        at = f"${len(args)}::float8"
        where += (f" AND (e.valid_from IS NULL OR e.valid_from <= {at})"
                  f" AND (e.valid_until IS NULL OR e.valid_until > {at})")
    total = await pool.fetchval(f"SELECT count(*) FROM a2e_entries e WHERE {where}", *args)
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM a2e_entries e WHERE {where}"
        f" ORDER BY e.updated_at DESC, e.id DESC LIMIT ${len(args) + 1} OFFSET ${len(args) + 2}",
        *args, f.limit, f.offset)
    return [_entry(r) for r in rows], int(total)


async def browse_entry(pool: Any, namespace: str, id: int, now: float) -> BrowsedEntry | None:
    """The live entry with row id `id` in `namespace`, or None."""
    row = await pool.fetchrow(
        f"SELECT {_COLUMNS} FROM a2e_entries e WHERE {_LIVE} AND e.id = $2 AND e.namespace = $3",
        now, id, namespace)
    return _entry(row) if row is not None else None


async def export_namespace(pool: Any, namespace: str, now: float, after: int = 0,
                           limit: int = 1000) -> list[BrowsedEntry]:
    """The live entries of `namespace` with a row id above `after`, in row order, at most
    `limit` (a page of an export)."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM a2e_entries e WHERE {_LIVE} AND e.namespace = $2"
        " AND e.id > $3 ORDER BY e.id LIMIT $4", now, namespace, after, limit)
    return [_entry(r) for r in rows]
