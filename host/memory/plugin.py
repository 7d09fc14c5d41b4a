"""`MemoryPlugin`: the four `memory/*` requests, tier rules and ranking over every tier.

Sessions are bound to their connection (`ConnectionContext`). The working tier lives in the
session; episodic and semantic go to the `EntryStore`. A store or forget reply is a future that
resolves after the commit; reads first wait for the connection's pending writes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import msgspec
from msgspec import UNSET

from host.config import Config
from host.core.context import ConnectionContext
from host.core.router import Router, then
from host.memory.access import Access
from host.memory.consolidate import Consolidator, Merge
from host.memory.extensions import (
    StoreExtensionHandlers,
    entry_vectors,
    retrieve_filters,
    working_matches,
)
from host.memory.history import HistoryHandler
from host.memory.session import CAPABILITY, DEFAULT_AGENT, Session, Sessions, sessions_of
from host.memory.usage import UsageHandler
from host.memory.watch import WatchHub
from host.memory.working import ByteBudget, WorkingTier
from host.search import judgement
from host.search.engine import SearchEngine
from host.search.rank import RankWeights, rank_matches
from host.store.growth import ReadLog, evicted_by
from host.store.interface import EntryStore
from host.store.records import PERSISTENT_TIERS, NewEntry, Query, Refusal, Scope, StoredEntry
from host.text.searchable import searchable_text
from protocol.clock import Clock, wall_clock
from protocol.codec import decode_entry, new_id, now, numbers_fit
from protocol.errors import ErrorCode, ProtocolError
from protocol.keys import canonical_key
from protocol.messages import (
    TIERS,
    VERSION,
    EntryOut,
    MemoryForgetRequest,
    MemoryForgetResponse,
    MemoryHistoryRequest,
    MemoryInitRequest,
    MemoryInitResponse,
    MemoryPathsRequest,
    MemoryRetrieveRequest,
    MemoryRetrieveResponse,
    MemoryStoreRequest,
    MemoryStoreResponse,
    MemorySweepRequest,
    MemoryUnwatchRequest,
    MemoryUsageRequest,
    MemoryWatchRequest,
)
from protocol.names import check_name
from protocol.validity import instant, valid_at, window

__all__ = ["MemoryPlugin", "DEFAULT_AGENT"]

_decode = msgspec.json.decode
# a store request's entries are checked `STEP_BYTES` of them at a time, the loop turning
# between (the handler runs alone: this connection's next request waits its turn). A request
# of 500 entries with 384-number vectors (~2 MB) was one step of the loop of 98-145 ms beside
# the SQLite writer's thread at a million rows (docs/benchmarks.md, "Scale: a million memories")
STEP_BYTES = 128 * 1024
# Why one entry of a `memory/store` was not stored: its error code and what to say after it.
Failure = tuple[ErrorCode, str]


def _out(e: StoredEntry, combined: float | None = None) -> EntryOut:
    out = EntryOut(
        key=msgspec.Raw(e.key), content=msgspec.Raw(e.content), tier=e.tier, tags=e.tags,
        source=e.source, score=e.score, ttl=e.ttl, created_at=e.created_at,
        updated_at=e.updated_at,
    )
    if e.relevance is not None:
        out.relevance = e.relevance
        out.combined = combined if combined is not None else e.relevance
    if e.valid_from is not None:  # the time extension: echoed only when the entry has one
        out.valid_from = e.valid_from
    if e.valid_until is not None:
        out.valid_until = e.valid_until
    return out


def _as_of(req: MemoryRetrieveRequest) -> float | None:
    """A retrieve's `as_of` as epoch seconds (None: not asked), `invalid_message` if malformed."""
    if req.as_of is None:
        return None
    try:
        return instant(req.as_of, "as_of")
    except ValueError as err:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, str(err), req_id=req.id,
                            field="as_of") from None


def _current(e: StoredEntry, as_of: float | None) -> bool:
    """True when a working entry is valid at a read's `as_of` (always, without one)."""
    return as_of is None or valid_at(e.valid_from, e.valid_until, as_of)


def _keys(keys: list[dict[str, Any]], req_id: str, most: int) -> tuple[bytes, ...]:
    if len(keys) > most:  # the cost bound of one request (limits.max_keys_per_request)
        raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                            f"{len(keys)} keys; at most {most} a request", req_id=req_id,
                            field="keys")
    try:
        return tuple(canonical_key(k) for k in keys)
    except (ValueError, TypeError, RecursionError) as err:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"keys: {err}", req_id=req_id,
                            field="keys") from None


class MemoryPlugin:
    """The memory capability. Register its handlers with `register(router)`."""

    capability = "memory"

    def __init__(
        self, store: EntryStore, config: Config, access: Access | None = None,
        search: SearchEngine | None = None, clock: Clock = wall_clock,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock  # the time entries are written, expire and rank by recency at
        self.search = search if search is not None else SearchEngine(store, None, config.search)
        self.access = access if access is not None else Access()
        self.weights = RankWeights.from_config(config.ranking)
        self.watches = WatchHub(store, config.watch, self.access,
                                max_keys=config.limits.max_keys_per_request)
        self.extensions = StoreExtensionHandlers(self)
        # history (`memory/history`) and consolidation on write
        self.history = HistoryHandler(self, store)
        self.consolidation = Consolidator(config, self.search, store)
        # the entries a retrieve returns are read: their read times, written in batches, kept
        # while a setting uses them (fading importance, eviction; `limits` may change on reload)
        self.reads = ReadLog(store, wanted=lambda: config.ranking.importance_half_life > 0
                             or config.limits.on_full == "evict")
        self.usage = UsageHandler(self)

    def register(self, router: Router) -> None:
        """Route the four memory requests and the watch extension's two to this plugin."""
        router.register(MemoryInitRequest, self.init, self.capability)
        router.register(MemoryStoreRequest, self.store_entries, self.capability)
        router.register(MemoryRetrieveRequest, self.retrieve, self.capability)
        router.register(MemoryForgetRequest, self.forget, self.capability)
        router.register(MemoryWatchRequest, self.watches.watch, self.capability)
        router.register(MemoryUnwatchRequest, self.watches.unwatch, self.capability)
        router.register(MemoryPathsRequest, self.extensions.paths, self.capability)
        router.register(MemorySweepRequest, self.extensions.sweep, self.capability)
        router.register(MemoryHistoryRequest, self.history.history, self.capability)
        router.register(MemoryUsageRequest, self.usage.usage, self.capability)

    # -- init ---------------------------------------------------------------------------

    def agent_for(self, req: MemoryInitRequest, ctx: ConnectionContext) -> str:
        """The agent of a new session: the authenticated identity, else scope.agent, else the
        handshake's agent_id, else "default". A scope.agent that contradicts the identity is
        `unauthorized`."""
        claimed = req.scope.get("agent")
        if claimed is not None and not isinstance(claimed, str):
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, "scope.agent must be a string",
                                req_id=req.id, field="scope.agent")
        if claimed:
            check_name(claimed, "scope.agent", req.id)
        if ctx.identity is not None:
            if claimed and claimed != ctx.identity:
                raise ProtocolError(ErrorCode.UNAUTHORIZED,
                                    "scope.agent differs from the authenticated agent",
                                    req_id=req.id, field="scope.agent")
            return ctx.identity
        return claimed or check_name(ctx.agent_id, "agent_id", req.id) or DEFAULT_AGENT

    async def init(self, req: MemoryInitRequest, ctx: ConnectionContext) -> MemoryInitResponse:
        """Open a session bound to this connection."""
        self.access.grant(ctx, req.namespace, req.id)
        if not req.namespace:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, "namespace must not be empty",
                                req_id=req.id, field="namespace")
        check_name(req.namespace, "namespace", req.id)
        limits = self.config.limits
        sessions = sessions_of(ctx)
        if sessions is not None and len(sessions.by_id) >= limits.max_sessions_per_connection:
            raise ProtocolError(ErrorCode.MEMORY_FULL,
                                f"at most {limits.max_sessions_per_connection} sessions a connection",
                                req_id=req.id)
        agent = self.agent_for(req, ctx)
        memory_id = str(uuid.uuid4())
        if sessions is None:
            sessions = Sessions(ByteBudget(limits.max_working_bytes))
            ctx.capabilities[CAPABILITY] = sessions
        working = WorkingTier(limits.max_working_entries, sessions.budget)
        sessions.by_id[memory_id] = Session(memory_id, Scope(req.namespace, agent), working)
        return MemoryInitResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                                  memory_id=memory_id, namespace=req.namespace)

    # -- store --------------------------------------------------------------------------

    async def store_entries(self, req: MemoryStoreRequest, ctx: ConnectionContext) -> Any:
        """Validate each entry, write working entries now and persistent ones through the
        store; the reply (a future) lists stored keys in request order and per-entry errors."""
        session, grant = self.access.session(ctx, req.memory_id, req.id)
        limits = self.config.limits
        if len(req.entries) > limits.max_entries_per_request:
            raise ProtocolError(
                ErrorCode.INVALID_MESSAGE,
                f"{len(req.entries)} entries; at most {limits.max_entries_per_request} a request",
                req_id=req.id, field="entries")
        policy = self.consolidation.policy(req.consolidate, session.scope.namespace, req.id)
        t = self.clock()
        outcomes: list[Failure | None] = [None] * len(req.entries)
        keys: list[bytes | None] = [None] * len(req.entries)
        persistent: list[NewEntry] = []
        where: list[int] = []
        watched = self.watches.watching_working(ctx, session)
        working: list[StoredEntry] = []  # for the session's watches
        step = 0  # bytes of entries checked since the loop last turned
        for i, raw in enumerate(req.entries):
            if step >= STEP_BYTES:
                step = 0
                await asyncio.sleep(0)
            step += len(raw)
            try:
                e = decode_entry(raw)
                key = canonical_key(e.key)
            except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError,
                    RecursionError) as err:
                outcomes[i] = (ErrorCode.INVALID_MESSAGE, str(err))
                continue
            if len(e.content) > limits.max_entry_bytes:
                outcomes[i] = (ErrorCode.INVALID_MESSAGE, f"content is {len(e.content)} bytes,"
                               f" over the limit of {limits.max_entry_bytes}")
                continue
            if not self.access.may_write(grant, e.tier):
                outcomes[i] = (ErrorCode.UNAUTHORIZED, f"the token may not write {e.tier}")
                continue
            # the searchable text is derived here, on the loop, while the writer thread may be
            # waiting on an fsync: the writer's part of a group commit stays short. `Raw` content
            # was only scanned: a number out of range (1e999) shows here, as this entry's error
            try:
                doc = _decode(e.content)
                text = searchable_text(doc, e.tags, e.key)
            except (msgspec.DecodeError, RecursionError) as err:
                outcomes[i] = (ErrorCode.INVALID_MESSAGE, f"content: {err}")
                continue
            if not numbers_fit(e.content, doc):  # a 400-digit integer: JSON, but no double
                outcomes[i] = (ErrorCode.INVALID_MESSAGE,
                               "content: an integer beyond the range of a double")
                continue
            try:
                vectors, space, dims = entry_vectors(e)
            except ValueError as err:
                outcomes[i] = (ErrorCode.INVALID_MESSAGE, f"vectors: {err}")
                continue
            try:  # the time extension: when the fact holds
                valid_from, valid_until = window(e.valid_from, e.valid_until)
            except ValueError as err:
                outcomes[i] = (ErrorCode.INVALID_MESSAGE, str(err))
                continue
            keys[i] = key
            new = NewEntry(tier=e.tier, key=key, content=bytes(e.content), tags=e.tags,
                           source=e.source, score=e.score, ttl=e.ttl, text=text,
                           vectors=vectors, vector_space=space, dims=dims,
                           valid_from=valid_from, valid_until=valid_until)
            if e.tier == "working":
                if session.working.put(new, text, t) is not None:
                    outcomes[i] = (ErrorCode.MEMORY_FULL, "working tier is full")
                elif watched:
                    held = session.working.get(key)
                    if held is not None:
                        working.append(replace(held))
            else:
                persistent.append(new)
                where.append(i)
        if working:  # after the reply, as the events of persistent entries come after commit
            asyncio.get_running_loop().call_soon(self.watches.working, ctx, session, "stored",
                                                 working)
        merges: list[Merge] = []
        if policy != "keep" and persistent:  # consolidation on write (host/memory/consolidate.py)
            merges = await self.consolidation.judge(ctx, session, persistent, where, policy, t)
            skipped = {m.index for m in merges if m.action == "skipped"}
            for i in skipped:
                keys[i] = None
            persistent = [e for i, e in zip(where, persistent) if i not in skipped]
            where = [i for i in where if i not in skipped]
        if not persistent and not merges:
            return self._store_reply(req, keys, outcomes)
        write: asyncio.Future[Any] | None = (
            asyncio.ensure_future(self.store.put(session.scope, persistent, t))
            if persistent else None)
        if merges:  # then retire what the new entries supersede, log the merges
            write = asyncio.ensure_future(
                self.consolidation.commit(session.scope, write, where, merges, t))
        assert write is not None
        ctx.last_write = write

        def finish(results: list[Any]) -> Any:
            # embed the new entries in the background; a query of this connection waits for them
            session.vector_ticket = self.search.notify()
            self.watches.poke(session.scope.namespace)
            for i, res in zip(where, results or ()):
                if res is Refusal.VECTOR_DIMS:
                    outcomes[i] = (ErrorCode.INVALID_MESSAGE,
                                   "vectors: not the dimension of the namespace's space")
                elif res is not None:
                    outcomes[i] = (ErrorCode(res), "storage quota reached")
            return self._store_reply(req, keys, outcomes, evicted_by(results),
                                     Consolidator.done(merges, results, where) if merges else None)

        return then(write, finish)

    def _store_reply(
        self, req: MemoryStoreRequest, keys: list[bytes | None], outcomes: list[Failure | None],
        evicted: int = 0, consolidated: list[Any] | None = None,
    ) -> Any:
        stored = [msgspec.Raw(k) for k, o in zip(keys, outcomes) if o is None and k is not None]
        errors = [f"entries[{i}]: {o[0]}: {o[1]}" for i, o in enumerate(outcomes) if o is not None]
        codes = {o[0] for o in outcomes if o is not None}
        if not stored and codes == {ErrorCode.MEMORY_FULL}:
            raise ProtocolError(ErrorCode.MEMORY_FULL, "storage quota reached; nothing was stored",
                                req_id=req.id)
        if not stored and codes == {ErrorCode.UNAUTHORIZED}:
            raise ProtocolError(ErrorCode.UNAUTHORIZED, "the token may not write these tiers",
                                req_id=req.id, field="entries")
        return MemoryStoreResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                                   stored=stored, errors=errors, evicted=evicted or UNSET,
                                   consolidated=consolidated or UNSET)  # type: ignore[arg-type]

    # -- retrieve -----------------------------------------------------------------------

    async def retrieve(
        self, req: MemoryRetrieveRequest, ctx: ConnectionContext
    ) -> MemoryRetrieveResponse:
        """Entries matching keys AND tags AND tier AND query, ranked, at most `limit`."""
        session, grant = self.access.session(ctx, req.memory_id, req.id)
        keys = _keys(req.keys, req.id, self.config.limits.max_keys_per_request)
        tiers = self.access.read_tiers(grant, req.tier, req.id)
        w = ctx.last_write
        if w is not None and not w.done():  # read-your-writes (ctx.writes_done, inlined)
            await ctx.writes_done()
        persistent = PERSISTENT_TIERS if tiers is TIERS else tuple(
            t for t in tiers if t in PERSISTENT_TIERS)
        where, prefixes, offset = retrieve_filters(req)
        q = Query(tiers=persistent, keys=keys, tags=tuple(req.tags), min_score=req.min_score,
                  limit=min(req.limit, self.config.limits.max_limit), where=where,
                  key_prefix=prefixes, offset=offset, as_of=_as_of(req))
        t = self.clock()
        if req.vector:  # the client-vector extension: persistent tiers, cosine similarity
            found, total = await self.extensions.vector_search(req, session, q, t)
            self.reads.note(session.scope.namespace, (e for _, e in found), t)
            entries = [_out(e, c) for c, e in found]
        elif req.query:
            sessions = sessions_of(ctx)
            ticket = max((s.vector_ticket for s in sessions.by_id.values()), default=0) \
                if sessions is not None else session.vector_ticket
            entries, total = await self._search(session, tiers, q, req.query, t, ticket,
                                                ctx.conn_id, req.supersede, req.collapse)
        else:
            entries, total = await self._find(session, tiers, q, t)
        if req.refresh_ttl and entries:
            await self.extensions.refresh(session, grant, entries, t, req.id)
        return MemoryRetrieveResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                                      entries=entries, total=total)  # type: ignore[arg-type]

    async def _find(
        self, session: Session, tiers: Sequence[str], q: Query, t: float
    ) -> tuple[list[EntryOut], int]:
        found: list[StoredEntry] = []
        total = 0
        working = session.working.find(q.keys, q.tags, q.min_score, t) \
            if "working" in tiers else []
        if working and (q.where or q.key_prefix or q.as_of is not None):
            working = [e for e in working if _current(e, q.as_of)
                       and working_matches(e, q.where, q.key_prefix)]
        if q.tiers:
            # with working entries to merge, the store's page starts at 0 and the merge pages
            found, total = await self.store.find(
                session.scope, replace(q, limit=q.limit + q.offset, offset=0) if working else q,
                t)
        if working:
            total += len(working)
            found = sorted(found + working, key=lambda e: (-e.score, -e.updated_at))[
                q.offset:q.offset + q.limit]
        self.reads.note(session.scope.namespace, found, t)
        return [_out(e) for e in found], total

    async def _search(
        self, session: Session, tiers: Sequence[str], q: Query, query: str, t: float,
        ticket: int = 0, conn: str = "", supersede: bool = False, collapse: bool = False,
    ) -> tuple[list[EntryOut], int]:
        ranked = await self.ranked(session.scope, q, query, t,
                                   session.working if "working" in tiers else None, ticket, conn)
        if "working" in tiers and (q.where or q.key_prefix or q.as_of is not None):
            ranked = [(c, e) for c, e in ranked if e.tier != "working"  # stores filter their own
                      or _current(e, q.as_of) and working_matches(e, q.where, q.key_prefix)]
        notes: dict[int, judgement.Judged] = {}
        if (supersede or collapse) and self.search.embedder is not None:
            ranked, notes = await judgement.judge(  # the present first, no repeats
                ranked, self.search.stored_vectors(session.scope.namespace),
                self.search.embedder.dim,
                supersede=supersede, collapse=collapse,
                now=t if q.as_of is None else q.as_of)  # when the facts' bounds are read
        page = ranked[q.offset:q.offset + q.limit]
        self.reads.note(session.scope.namespace, (e for _, e in page), t)
        return [judgement.mark(_out(e, c), notes.get(id(e))) for c, e in page], len(ranked)

    async def ranked(
        self, scope: Scope, q: Query, query: str, t: float, working: WorkingTier | None = None,
        ticket: int = 0, conn: str = "",
    ) -> list[tuple[float, StoredEntry]]:
        """Every match of a query read (`q` over the persistent tiers, plus `working` when the
        read covers it), with its combined score, best first: what a `memory/retrieve` with
        `query` pages. The memory browser's Search calls it too. `ticket` and `conn`: the
        asking connection's newest write ticket and its id (read-your-writes and the fair
        share of query embedding, see `SearchEngine.search`)."""
        # every tier's candidates are fused as one pool: relevance means the same in each
        candidates = await self.search.search(
            scope, q, query, t, self.config.ranking.search_candidates, working, ticket, conn)
        # importance that fades (ranking.importance_half_life) reads when each was last read
        last_read = (await self.reads.last_read(scope.namespace, candidates)
                     if self.weights.importance_half_life > 0 else None)
        return rank_matches(candidates, q.min_score, t, self.weights, last_read)

    # -- forget -------------------------------------------------------------------------

    async def forget(self, req: MemoryForgetRequest, ctx: ConnectionContext) -> Any:
        """Delete entries matching keys AND tags in the tier(s); reply after the commit."""
        session, grant = self.access.session(ctx, req.memory_id, req.id)
        keys = _keys(req.keys, req.id, self.config.limits.max_keys_per_request)
        if not keys and not req.tags:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                "forget needs keys or tags (no accidental wipe)",
                                req_id=req.id, field="keys")
        tiers = self.access.forget_tiers(grant, req.tier, req.id)
        t = self.clock()
        deleted = 0
        if "working" in tiers:
            gone = session.working.forget_entries(keys, req.tags, t)
            deleted = len(gone)
            if gone:
                asyncio.get_running_loop().call_soon(self.watches.working, ctx, session,
                                                     "forgotten", gone)
        persistent = [x for x in tiers if x in PERSISTENT_TIERS]

        def reply(n: int) -> MemoryForgetResponse:
            return MemoryForgetResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                                        deleted=n)

        if not persistent:
            return reply(deleted)
        write = asyncio.ensure_future(
            self.store.forget(session.scope, persistent, keys, req.tags, t))
        ctx.last_write = write

        def finish(n: int) -> MemoryForgetResponse:
            self.search.notify()  # drop the deleted entries' vectors from memory
            if n:
                self.watches.poke(session.scope.namespace)
            return reply(deleted + n)

        return then(write, finish)
