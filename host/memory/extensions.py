"""The store extensions of the memory capability (docs/protocol.md, "Store extensions").

What a key-value store client (LangGraph's `BaseStore`, `host.langgraph`) needs that the eight
messages cannot say, as optional fields and two messages any A2E client may use:

- on `memory/retrieve`: `filter` (conditions on content values), `key_prefix`, `offset`,
  `vector` + `vector_space` (search by a client-computed vector: relevance is the cosine
  similarity), `refresh_ttl` (restart the TTL of what is returned);
- on a store entry: `vectors` + `vector_space` (kept per namespace and space, never returned);
- `memory/paths` (the distinct values of an array key member: LangGraph's namespaces) and
  `memory/sweep` (delete the namespace's expired entries now, with their count).

Every field is checked here before anything is read or written (`invalid_message` with
`detail.field`), with its bounds as constants; access rules and quotas are the plugin's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import msgspec

from host.config import Config
from host.core.context import ConnectionContext
from host.memory.access import Access
from host.memory.watch import WatchHub
from host.search.client_vectors import MAX_DIMS, ROWS_PER_ENTRY, SpaceDims, nearest, unit_rows
from host.search.engine import SearchEngine
from host.store.filters import (
    Condition,
    FilterError,
    KeyPrefix,
    matches,
    parse_filter,
    parse_key_prefix,
    select_paths,
)
from host.store.interface import EntryStore
from host.store.records import PERSISTENT_TIERS, Query, StoredEntry
from protocol.clock import Clock
from protocol.codec import new_id, now
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    VERSION,
    MemoryEntry,
    MemoryPathsRequest,
    MemoryPathsResponse,
    MemoryRetrieveRequest,
    MemorySweepRequest,
    MemorySweepResponse,
)
from protocol.names import is_space

if TYPE_CHECKING:
    from host.core.grant import Grant
    from host.memory.session import Session
    from protocol.messages import EntryOut

__all__ = [
    "DEFAULT_SPACE",
    "MAX_DIMS",
    "MAX_OFFSET",
    "MAX_VECTORS_PER_ENTRY",
    "StoreExtensionHandlers",
    "entry_vectors",
    "retrieve_filters",
    "space_name",
    "working_matches",
]

MAX_OFFSET = 10_000  # `offset` of a retrieve or a paths request
PATHS_ON_LOOP = 2000  # distinct paths a paths request selects on the loop (more: on a thread)
MAX_VECTORS_PER_ENTRY = ROWS_PER_ENTRY  # rows of one entry's `vectors` (64)
DEFAULT_SPACE = "default"  # the space of vectors sent with `vector_space` ""
_decode = msgspec.json.decode


def _invalid(message: str, req_id: str, field: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_MESSAGE, message, req_id=req_id, field=field)


def space_name(name: str, req_id: str = "", field: str = "vector_space") -> str:
    """The space a request names ("" is `DEFAULT_SPACE`); `invalid_message` if malformed."""
    if not name:
        return DEFAULT_SPACE
    if not is_space(name):
        raise _invalid("vector_space: 1 to 64 letters, digits or '_.:-'", req_id, field)
    return name


def retrieve_filters(req: MemoryRetrieveRequest) -> tuple[
        tuple[Condition, ...], tuple[KeyPrefix, ...], int]:
    """A retrieve's `filter`, `key_prefix` and `offset`, checked."""
    try:
        where = parse_filter(req.filter) if req.filter else ()
        prefixes = parse_key_prefix(req.key_prefix) if req.key_prefix else ()
    except FilterError as err:
        raise _invalid(str(err), req.id, err.field) from None
    if req.offset > MAX_OFFSET:
        raise _invalid(f"offset is at most {MAX_OFFSET}", req.id, "offset")
    return where, prefixes, req.offset


def _entry_space(name: str) -> str:
    """`space_name` of a store entry's `vector_space`: ValueError (the entry's error)."""
    try:
        return space_name(name)
    except ProtocolError as err:
        raise ValueError(err.message) from None


def entry_vectors(e: MemoryEntry) -> tuple[bytes, str, int]:
    """An entry's vectors as (unit float32 rows, space, dimension); (b"", "", 0) for none.
    Raises ValueError (the entry's error) when they are malformed or over the bounds."""
    if not e.vectors:
        if e.vector_space:
            _entry_space(e.vector_space)  # a malformed name is an error even with no vectors
        return b"", "", 0
    if e.tier == "working":
        raise ValueError("vectors are kept for the episodic and semantic tiers only")
    if len(e.vectors) > MAX_VECTORS_PER_ENTRY:
        raise ValueError(f"at most {MAX_VECTORS_PER_ENTRY} vectors an entry")
    space = _entry_space(e.vector_space)
    rows = unit_rows(e.vectors)
    return rows.tobytes(), space, int(rows.shape[1])


def working_matches(e: StoredEntry, where: Sequence[Condition],
                    prefixes: Sequence[KeyPrefix]) -> bool:
    """True when a working-tier entry meets a retrieve's filters (evaluated in process)."""
    if not where and not prefixes:
        return True
    return matches(_decode(e.content), _decode(e.key), where, prefixes)


class _Plugin(Protocol):
    """What the handlers use of the memory plugin (`host.memory.plugin.MemoryPlugin`)."""

    store: EntryStore
    access: Access
    config: Config
    clock: Clock
    search: SearchEngine
    watches: WatchHub


class StoreExtensionHandlers:
    """`memory/paths`, `memory/sweep`, and the vector search and TTL refresh of a retrieve,
    over the plugin's store."""

    def __init__(self, plugin: _Plugin) -> None:
        self.plugin = plugin

    async def vector_search(
        self, req: MemoryRetrieveRequest, session: Session, q: Query, t: float
    ) -> tuple[list[tuple[float, StoredEntry]], int]:
        """The page of a retrieve by `vector` (persistent tiers only) and how many match."""
        if req.query:
            raise _invalid("a retrieve has a query or a vector, not both", req.id, "vector")
        space = space_name(req.vector_space, req.id)
        try:
            v = unit_rows([req.vector])[0]
        except ValueError as err:
            raise _invalid(str(err), req.id, "vector") from None
        store = self.plugin.store
        if not q.tiers:
            return [], 0
        spaces = self.plugin.search.spaces
        if spaces is not None:  # a store searched in memory (SQLite): the budgeted indexes
            try:
                return await spaces.search(session.scope, q, space, v, t)
            except SpaceDims as err:
                raise _invalid(f"space {space!r} has {err.dims} dimensions, not {len(v)}",
                               req.id, "vector") from None
        dims, rows = await store.client_vectors(session.scope, q, space, t)
        if dims and dims != len(v):
            raise _invalid(f"space {space!r} has {dims} dimensions, not {len(v)}", req.id,
                           "vector")
        ranked = nearest(v, rows, q.min_score)
        page = ranked[q.offset:q.offset + q.limit]
        if not page:
            return [], len(ranked)
        found = {e.id: e for e in await store.fetch(session.scope, q, [i for _, i in page], t)}
        out = []
        for s, i in page:
            e = found.get(i)
            if e is not None:
                e.relevance = s
                out.append((s, e))
        return out, len(ranked)

    async def refresh(self, session: Session, grant: Grant | None, entries: Sequence[EntryOut],
                      t: float, req_id: str) -> None:
        """Restart the TTL of the returned persistent entries in tiers the token may write;
        returns after the commit."""
        by_tier: dict[str, list[bytes]] = {}
        for e in entries:
            if e.tier in PERSISTENT_TIERS and e.ttl > 0 and self.plugin.access.may_write(
                    grant, e.tier):
                by_tier.setdefault(e.tier, []).append(bytes(e.key))
        if not by_tier:
            return
        store = self.plugin.store
        moved = 0
        for tier, keys in by_tier.items():
            moved += await store.refresh(session.scope, (tier,), keys, t)
        if moved:  # the search's index learns the new expiry; a query of the session waits
            session.vector_ticket = self.plugin.search.notify()

    async def paths(self, req: MemoryPathsRequest, ctx: ConnectionContext
                    ) -> MemoryPathsResponse:
        """The distinct key paths the session may read (see `MemoryPathsRequest`)."""
        plugin = self.plugin
        session, grant = plugin.access.session(ctx, req.memory_id, req.id)
        try:
            parse_key_prefix({req.field: ["*"]}, "field")  # checks the member's name
            parse_key_prefix({"p": req.prefix}, "prefix")
            parse_key_prefix({"p": req.suffix}, "suffix")
        except FilterError as err:
            raise _invalid(str(err), req.id, err.field) from None
        if req.offset > MAX_OFFSET:
            raise _invalid(f"offset is at most {MAX_OFFSET}", req.id, "offset")
        tiers = tuple(x for x in plugin.access.read_tiers(grant, req.tier, req.id)
                      if x in PERSISTENT_TIERS)
        await ctx.writes_done()
        store = self.plugin.store
        paths: list[list[str]] = []
        if tiers:
            t = plugin.clock()
            found = await store.key_paths(session.scope, Query(tiers=tiers), req.field,
                                          req.prefix, t)

            def select() -> list[list[str]]:
                return select_paths((_decode(x) for x in found), req.prefix, req.suffix,
                                    req.max_depth, min(req.limit, plugin.config.limits.max_limit),
                                    req.offset)

            # decoding and sorting many distinct paths is Python work: off the loop
            paths = select() if len(found) <= PATHS_ON_LOOP else await asyncio.to_thread(select)
        return MemoryPathsResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                                   paths=paths)

    async def sweep(self, req: MemorySweepRequest, ctx: ConnectionContext
                    ) -> MemorySweepResponse:
        """Delete the expired entries of the session's namespace it may forget in `tier`."""
        plugin = self.plugin
        session, grant = plugin.access.session(ctx, req.memory_id, req.id)
        tiers = tuple(x for x in plugin.access.forget_tiers(grant, req.tier, req.id)
                      if x in PERSISTENT_TIERS)
        store = self.plugin.store
        n = await store.sweep(session.scope, tiers, plugin.clock()) if tiers else 0
        if n:
            plugin.search.notify()
            plugin.watches.poke(session.scope.namespace)
        return MemorySweepResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                                   deleted=n)

