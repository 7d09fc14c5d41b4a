"""The SQL of the memory browser's reads on SQLite (`host.store.interface.EntryStore`).

Plain functions over one `sqlite3.Connection`, like `sqlite.reads`. Unlike the wire's reads they
cross the agents of a namespace (an operator's view, reached only through `host.ui`, which
decides who may see which namespace). They read without an index made for them (newest first
is a sort of the namespace's live rows): the store runs them on a worker thread with a
connection of its own, so a big namespace never holds up the event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from host.store.records import BrowsedEntry, BrowseFilter, NamespaceOverview
from host.store.sqlite.reads import VALID_AT

__all__ = ["browse", "browse_entry", "export_namespace", "overview"]

_tags = msgspec.json.Decoder(list[str])
_LIVE = "(e.expires_at IS NULL OR e.expires_at > ?)"
_COLUMNS = (
    "e.id, e.tier, e.owner, e.agent, e.key, e.content, e.tags, e.source, e.score, e.ttl,"
    " e.created_at, e.updated_at,"
    " CASE WHEN EXISTS (SELECT 1 FROM embed_queue q WHERE q.entry_id = e.id) THEN 'queued'"
    " WHEN EXISTS (SELECT 1 FROM vectors v WHERE v.entry_id = e.id) THEN 'written'"
    " ELSE 'none' END, e.valid_from, e.valid_until"
)


def _entry(r: tuple) -> BrowsedEntry:
    return BrowsedEntry(
        id=r[0], tier=r[1], owner=r[2], agent=r[3], key=r[4].encode(), content=r[5].encode(),
        tags=_tags.decode(r[6]), source=r[7], score=r[8], ttl=r[9], created_at=r[10],
        updated_at=r[11], vector=r[12], valid_from=r[13], valid_until=r[14],
    )


def overview(
    conn: sqlite3.Connection, namespaces: Sequence[str] | None, now: float
) -> list[NamespaceOverview]:
    """The namespaces with live entries (those of `namespaces` only, unless None), by name."""
    where, args = _LIVE, list[object]([now])
    if namespaces is not None:
        if not namespaces:
            return []
        where += f" AND e.namespace IN ({','.join('?' * len(namespaces))})"
        args += list(namespaces)
    rows = conn.execute(
        f"SELECT e.namespace, e.tier, e.agent, count(*), coalesce(sum(e.size), 0)"
        f" FROM entries e WHERE {where} GROUP BY e.namespace, e.tier, e.agent", args,
    ).fetchall()
    backlog = dict(conn.execute(
        f"SELECT e.namespace, count(*) FROM embed_queue q JOIN entries e ON e.id = q.entry_id"
        f" WHERE {where} GROUP BY e.namespace", args,
    ).fetchall())
    by_ns: dict[str, tuple[dict[str, int], dict[str, dict[str, int]], list[int]]] = {}
    for ns, tier, agent, n, size in rows:
        tiers, agents, total = by_ns.setdefault(ns, ({}, {}, [0]))
        tiers[tier] = tiers.get(tier, 0) + n
        agents.setdefault(agent, {})[tier] = n
        total[0] += size
    return [
        NamespaceOverview(ns, tiers, agents, total[0], backlog.get(ns, 0))
        for ns, (tiers, agents, total) in sorted(by_ns.items())
    ]


def _like(text: str) -> str:
    """`text` as a LIKE pattern matching it anywhere, its own % and _ taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def browse(
    conn: sqlite3.Connection, namespace: str, f: BrowseFilter, now: float
) -> tuple[list[BrowsedEntry], int]:
    """Live entries of `namespace` matching `f`, newest first: (the page, how many match)."""
    if not f.tiers:
        return [], 0
    where = f"e.namespace = ? AND e.tier IN ({','.join('?' * len(f.tiers))}) AND {_LIVE}"
    args: list[object] = [namespace, *f.tiers, now]
    if f.agent:
        where += " AND e.agent = ?"
        args.append(f.agent)
    if f.key_text:
        where += " AND e.key LIKE ? ESCAPE '\\'"
        args.append(_like(f.key_text))
    for tag in dict.fromkeys(f.tags):
        where += (" AND EXISTS (SELECT 1 FROM entry_tags t WHERE t.namespace = e.namespace"
                  " AND t.tier = e.tier AND t.owner = e.owner AND t.tag = ? AND t.entry_id = e.id)")
        args.append(tag)
    if f.as_of is not None:  # the entries valid then, by the rule of a read's `as_of`
        where += VALID_AT
        args += [f.as_of, f.as_of]
    total = conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", args).fetchone()[0]
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM entries e WHERE {where}"
        " ORDER BY e.updated_at DESC, e.id DESC LIMIT ? OFFSET ?",
        [*args, f.limit, f.offset],
    ).fetchall()
    return [_entry(r) for r in rows], int(total)


def browse_entry(
    conn: sqlite3.Connection, namespace: str, id: int, now: float
) -> BrowsedEntry | None:
    """The live entry with row id `id` in `namespace`, or None."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM entries e WHERE e.id = ? AND e.namespace = ? AND {_LIVE}",
        (id, namespace, now),
    ).fetchone()
    return _entry(row) if row is not None else None


def export_namespace(conn: sqlite3.Connection, namespace: str, now: float, after: int = 0,
                     limit: int = 1000) -> list[BrowsedEntry]:
    """The live entries of `namespace` with a row id above `after`, in row order, at most
    `limit` (a page of an export)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM entries e WHERE e.namespace = ? AND {_LIVE} AND e.id > ?"
        " ORDER BY e.id LIMIT ?",
        (namespace, now, after, limit),
    ).fetchall()
    return [_entry(r) for r in rows]
