"""Change streams: `memory/watch` and `memory/unwatch`, fed by the store's change log.

A watch belongs to one session (and so to one connection). It sees exactly what a retrieve of
that session could read: its own working entries, its agent's episodic entries and the
namespace's semantic entries, in the tiers its token may read, narrowed by keys and tags. The
persistent tiers come from the store's change log (`host.store.changes`), the working tier
from the session itself (in process: never logged, never replayed).

One `Feed` (`host.memory.feed`, with `Watch` and the cursors) a namespace watched on this host
reads the log once for all its watches: after each commit through this host (`poke`), after each
garbage collection, and every `watch.poll_interval` seconds for the changes other processes or
hosts committed (one query for every watched namespace). It keeps the newest changes it read,
decoded (`RING` of them and at most `RING_BYTES`), so a live watch is served from memory; a
watch behind that, or one started with `since`, reads the log itself up to where it started (the
log holds no content of what was forgotten since; the feed's memory may), page by page
(`host.store.changes.PAGE` changes, `PAGE_BYTES`), and joins the feed when it has caught up. A
cursor is the namespace's sequence number of the last change delivered (`"<seq>"`); a working-
tier event, which has no place in the log, carries `"<seq>.<n>"`, the durable position and a
count from 1, so cursors stay strictly increasing. `parse_cursor` accepts exactly these forms.

Delivery goes through the connection's `ctx.push(message, key, limit)` (the request core's
ordered output): an event is queued after every reply owed when it is pushed, at most
`watch.max_pending_events` of one watch unsent and, with everything else the connection has
waiting, `limits.max_unsent_bytes`. A live watch over either bound is ended with
`memory/watch/ended/event` (reason `lagging`, the last cursor delivered) and costs nothing
more; other watches are not held up. A replay waits for room instead (it holds one page). A
live change that a watch sees whole goes as `Pieces`: its entries encoded once, shared by every
watch that gets them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial

import msgspec

from host.config import WatchConfig
from host.core.context import ConnectionContext, Pieces
from host.lifecycle import Periodic
from host.memory.access import Access
from host.memory.feed import Feed, Watch, WatchState, parse_cursor
from host.memory.session import Session
from host.store.changes import (
    PAGE,
    PAGE_BYTES,
    decode_entries,
    removed_record,
    stored_record,
)
from host.store.interface import ChangeNotices, EntryStore
from host.store.records import PERSISTENT_TIERS, StoredEntry
from protocol.codec import new_id, now
from protocol.errors import ErrorCode, ProtocolError
from protocol.keys import canonical_key
from protocol.messages import (
    VERSION,
    MemoryChangedEvent,
    MemoryUnwatchRequest,
    MemoryUnwatchResponse,
    MemoryWatchEndedEvent,
    MemoryWatchRequest,
    MemoryWatchResponse,
)

__all__ = ["CAPABILITY", "Watch", "WatchHub", "parse_cursor"]

CAPABILITY = "memory.watch"  # the hub's key in `ConnectionContext.capabilities`

log = logging.getLogger("a2e_host.watch")

_encode = msgspec.json.Encoder().encode
_SPLIT = msgspec.Raw(b"0")  # where an event's entries go, when they are encoded apart
_SPLIT_AT = b'"entries":0'
_ROOM_WAIT = (0.005, 0.2)  # a replay's first and longest wait for room on its connection


class _Closer:
    """The watch hub's state of one connection (`ConnectionContext.capabilities`): closing it
    drops the connection's watches."""

    def __init__(self, hub: WatchHub, ctx: ConnectionContext) -> None:
        self.hub, self.ctx = hub, ctx

    def close(self) -> None:
        self.hub.closed(self.ctx)


class WatchHub:
    """Every watch of one host. `register(router)`, `start()`, `stop()`; the memory plugin
    calls `poke(namespace)` after each commit and `working(...)` after working-tier writes."""

    def __init__(self, changes: EntryStore | None, config: WatchConfig, access: Access, *,
                 max_keys: int = 1_000) -> None:
        self.log = changes
        self.config = config
        self.max_keys = max_keys  # keys, and tags, one watch may name (limits.max_keys_per_request)
        self.access = access
        self.feeds: dict[str, Feed] = {}
        self._by_conn: dict[str, dict[str, Watch]] = {}
        self._poller = Periodic(self._poll, config.poll_interval, log,
                                "polling the change log failed")
        self.ended: dict[str, int] = {}  # watches ended by the host, by reason (metrics)
        self.events_sent = 0  # memory/changed/event messages queued to clients (metrics)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen for changes committed elsewhere when the store can tell (PostgreSQL's
        LISTEN/NOTIFY), and poll the log every `watch.poll_interval` in any case (the changes
        of another process on SQLite; a notification lost with a dropped connection)."""
        if self.log is None or self._poller.running:
            return
        if isinstance(self.log, ChangeNotices):  # once a start (host/store/interface.py)
            await self.log.listen_changes(self._notified)
        self._poller.start()

    def _notified(self, namespace: str) -> None:
        if namespace:
            self.poke(namespace)
        else:
            for ns in list(self.feeds):
                self.poke(ns)

    async def stop(self) -> None:
        """End every watch (reason `shutdown`, so clients know where to resume) and stop."""
        for conn in list(self._by_conn.values()):
            for w in list(conn.values()):
                self._end(w, "shutdown", "the host is shutting down")
        await self._poller.stop()
        for feed in self.feeds.values():
            if feed.fetching is not None:
                feed.fetching.cancel()
        self.feeds.clear()

    @property
    def count(self) -> int:
        """Watches open on this host."""
        return sum(len(ws) for ws in self._by_conn.values())

    # -- requests ----------------------------------------------------------------------------

    async def watch(self, req: MemoryWatchRequest, ctx: ConnectionContext) -> MemoryWatchResponse:
        """Open a watch on the session `req.memory_id`; its events follow the reply."""
        session, grant = self.access.session(ctx, req.memory_id, req.id)
        tiers = self.access.read_tiers(grant, req.tier, req.id)
        for name, given in (("keys", req.keys), ("tags", req.tags)):
            if len(given) > self.max_keys:  # a watch holds them as long as it lives
                raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                    f"{len(given)} {name}; at most {self.max_keys} a watch",
                                    req_id=req.id, field=name)
        try:
            keys = frozenset(canonical_key(k) for k in req.keys)
        except (ValueError, TypeError, RecursionError) as err:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"keys: {err}", req_id=req.id,
                                field="keys") from None
        since = parse_cursor(req.since, req.id)
        limit = self.config.max_watches_per_connection
        if len(self._by_conn.get(ctx.conn_id, ())) >= limit:
            raise ProtocolError(ErrorCode.MEMORY_FULL, f"at most {limit} watches a connection",
                                req_id=req.id)
        if ctx.push is None:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                "this transport cannot carry events", req_id=req.id, field="type")
        ns = session.scope.namespace
        position = head = 0
        if self.log is not None:
            head = await self.log.change_head(ns)
            if since > head:
                raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                    f"cursor {req.since!r} is ahead of this namespace's log",
                                    req_id=req.id, field="since")
            if 0 <= since < await self.log.change_floor(ns):
                raise ProtocolError(
                    ErrorCode.CURSOR_EXPIRED,
                    f"cursor {req.since!r} is older than the change log keeps"
                    f" (watch.retention_seconds / retention_rows): re-read, then watch again",
                    req_id=req.id, field="since")
            position = head if since < 0 else since
        # from here on nothing awaits: the connection cannot close under the registration
        self.access.session(ctx, req.memory_id, req.id)  # still open after the reads above
        mine = self._by_conn.get(ctx.conn_id)
        if mine is None:
            mine = self._by_conn[ctx.conn_id] = {}
            ctx.capabilities[CAPABILITY] = _Closer(self, ctx)
        if len(mine) >= limit:
            raise ProtocolError(ErrorCode.MEMORY_FULL, f"at most {limit} watches a connection",
                                req_id=req.id)
        w = Watch(new_id(), ctx, session.memory_id, session.scope, req.tier, frozenset(tiers),
                  keys, frozenset(req.tags), position, head if since >= 0 else 0)
        mine[w.id] = w
        if self.log is not None and any(t in PERSISTENT_TIERS for t in tiers):
            feed = self.feeds.get(ns)
            if feed is None:  # it holds what follows `head`; a watch from before replays
                feed = self.feeds[ns] = Feed(ns, head)
            feed.watches[w.id] = w
        ctx.after_reply(partial(self._begin, w))  # the first event goes after the reply
        return MemoryWatchResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                                   watch_id=w.id, cursor=w.cursor)

    async def unwatch(
        self, req: MemoryUnwatchRequest, ctx: ConnectionContext
    ) -> MemoryUnwatchResponse:
        """End a watch of this connection; no event of it follows the reply."""
        self.access.session(ctx, req.memory_id, req.id)
        w = self._by_conn.get(ctx.conn_id, {}).get(req.watch_id)
        if w is None or w.memory_id != req.memory_id:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, "no such watch on this session",
                                req_id=req.id, field="watch_id")
        self._drop(w)
        return MemoryUnwatchResponse(id=new_id(), version=VERSION, ts=now(), req_id=req.id)

    def closed(self, ctx: ConnectionContext) -> None:
        """The connection is gone: drop its watches (nothing is sent)."""
        for w in list(self._by_conn.get(ctx.conn_id, {}).values()):
            self._drop(w)
        self._by_conn.pop(ctx.conn_id, None)

    # -- what changes tell the hub -----------------------------------------------------------

    def poke(self, namespace: str) -> None:
        """Something committed in `namespace`: read the log for its watches."""
        feed = self.feeds.get(namespace)
        if feed is None:
            return
        if feed.fetching is not None:
            feed.again = True
            return
        feed.fetching = asyncio.get_running_loop().create_task(self._fetch(feed))

    async def collected(self, t: float) -> None:
        """After a garbage collection at `t`: announce what expired, prune the change log."""
        for ns in list(self.feeds):
            self.poke(ns)
        if self.log is not None:
            n = await self.log.prune_changes(t - self.config.retention_seconds,
                                             self.config.retention_rows)
            if n:
                log.info("change log: %d changes past watch.retention pruned", n)

    def watching_working(self, ctx: ConnectionContext, session: Session) -> bool:
        """True when a watch of `session` follows its working tier."""
        mine = self._by_conn.get(ctx.conn_id)
        return bool(mine) and any(w.memory_id == session.memory_id and "working" in w.tiers
                                  for w in mine.values())  # type: ignore[union-attr]

    def working(self, ctx: ConnectionContext, session: Session, op: str,
                entries: Sequence[StoredEntry]) -> None:
        """Working-tier entries of `session` were stored or forgotten (`op`). Events go at
        once to the session's own watches (nobody else may see them)."""
        mine = self._by_conn.get(ctx.conn_id)
        if not mine or not entries:
            return
        wires = [(e, _working_wire(op, e)) for e in entries]
        for w in list(mine.values()):
            if w.memory_id != session.memory_id or "working" not in w.tiers or \
                    w.state is WatchState.ENDED:
                continue
            seen = [wire for e, wire in wires
                    if (not w.keys or e.key in w.keys) and (not w.tags or w.tags.issubset(e.tags))]
            if seen:
                w.working += 1
                if not self._push(w, op, seen):
                    w.working -= 1
                    self._end(w, "lagging", "the client does not read its events")

    # -- delivery ----------------------------------------------------------------------------

    def _begin(self, w: Watch) -> None:
        if w.state is not WatchState.STARTING:
            return
        feed = self.feeds.get(w.scope.namespace)
        if feed is None or w.id not in feed.watches:
            w.state = WatchState.LIVE  # working tier only
            return
        if w.position < feed.complete_after or w.position < w.until:
            self._replay(w)  # from the log, not the feed's memory: what was forgotten is gone
        else:
            w.state = WatchState.LIVE
            self._pump(w)

    def _allowed(self, w: Watch) -> bool:
        """Re-check the watch's rights (a reload may have revoked the token or a right);
        ends the watch when it may no longer read."""
        try:
            _, grant = self.access.session(w.ctx, w.memory_id, "")
            tiers = self.access.read_tiers(grant, w.tier, "")
        except ProtocolError as err:
            if err.code is ErrorCode.MEMORY_NOT_FOUND:
                self._drop(w)
            else:
                self._end(w, "unauthorized", err.message)
            return False
        if len(tiers) != len(w.tiers):
            w.tiers = frozenset(tiers)
        return True

    def _pump(self, w: Watch) -> None:
        """Deliver to a live watch what its feed holds after its position."""
        feed = self.feeds.get(w.scope.namespace)
        if w.state is not WatchState.LIVE or feed is None or w.position >= feed.last:
            return
        if w.position < feed.complete_after:
            self._replay(w)
            return
        if not self._allowed(w):
            return
        for row in feed.after(w.position):
            seen = [e.wire for e in row.entries if w.visible(e)]
            if not seen:
                w.position = row.seq
                w.working = 0
                continue
            if len(seen) == len(row.entries):  # one encoding for every watch that sees it all
                if row.every is None:
                    row.every = _encode(seen)
                    feed.bytes += len(row.every)
                body = row.every
            else:
                body = _encode(seen)
            if not self._push_body(w, row.seq, row.op, body):
                self._end(w, "lagging", "the client does not read its events")
                return
            w.position = row.seq
            w.working = 0

    def _push_at(self, w: Watch, seq: int, op: str, seen: list[msgspec.Raw]) -> bool:
        before = (w.position, w.working)
        w.position, w.working = seq, 0
        if self._push(w, op, seen):
            return True
        w.position, w.working = before
        return False

    def _push_body(self, w: Watch, seq: int, op: str, body: bytes) -> bool:
        """`_push_at` of entries already encoded (`body`, a JSON array): the event goes as
        `Pieces`, so the watches of one connection that get the same change hold it once."""
        before = (w.position, w.working)
        w.position, w.working = seq, 0
        head = _encode(MemoryChangedEvent(id=new_id(), version=VERSION, ts=now(),
                                          watch_id=w.id, cursor=w.cursor, op=op,
                                          entries=_SPLIT))  # type: ignore[arg-type]
        cut = head.index(_SPLIT_AT) + len(_SPLIT_AT) - 1
        push = w.ctx.push
        if push is not None and push(Pieces(head[:cut], body, head[cut + 1:]), key=w.id,
                                     limit=self.config.max_pending_events):
            self.events_sent += 1
            return True
        w.position, w.working = before
        return False

    def _push(self, w: Watch, op: str, seen: list[msgspec.Raw]) -> bool:
        event = MemoryChangedEvent(id=new_id(), version=VERSION, ts=now(), watch_id=w.id,
                                   cursor=w.cursor, op=op, entries=seen)  # type: ignore[arg-type]
        push = w.ctx.push
        if push is None or not push(event, key=w.id, limit=self.config.max_pending_events):
            return False
        self.events_sent += 1
        return True

    def _replay(self, w: Watch) -> None:
        if w.task is None:
            w.state = WatchState.REPLAYING
            w.task = asyncio.get_running_loop().create_task(self._replaying(w))

    async def _replaying(self, w: Watch) -> None:
        """Read the log after the watch's position until the feed holds the rest."""
        assert self.log is not None
        ns = w.scope.namespace
        try:
            while w.state is WatchState.REPLAYING:
                feed = self.feeds.get(ns)
                if feed is None:
                    return
                if w.position >= feed.complete_after and w.position >= w.until:
                    w.state = WatchState.LIVE
                    break
                if w.position < await self.log.change_floor(ns):
                    self._end(w, "retention", "the change log no longer holds the changes"
                              " after this cursor: re-read, then watch again")
                    return
                rows = await self.log.changes_after(ns, w.position, PAGE, PAGE_BYTES)
                if not rows:  # nothing left in the log: nothing between here and the feed
                    if w.position < await self.log.change_floor(ns):
                        continue
                    w.position = max(w.position, feed.complete_after, w.until)
                    continue
                for c in rows:
                    if w.state is not WatchState.REPLAYING or not self._allowed(w):
                        return
                    seen = [e.wire for e in decode_entries(c.entries) if w.visible(e)]
                    wait = _ROOM_WAIT[0]
                    while seen and not self._push_at(w, c.seq, c.op, seen):
                        await asyncio.sleep(wait)  # the client reads slowly: wait for room
                        wait = min(wait * 2, _ROOM_WAIT[1])
                        if w.state is not WatchState.REPLAYING:
                            return
                    w.position, w.working = c.seq, 0
                await asyncio.sleep(0)  # a page at a time: other clients go on meanwhile
        except Exception:
            log.exception("watch %s: replay failed", w.id)
            self._end(w, "shutdown", "internal error while replaying; watch again")
            return
        finally:
            w.task = None
        self._pump(w)

    async def _fetch(self, feed: Feed) -> None:
        """Read the feed's namespace's new changes and hand them to its live watches."""
        assert self.log is not None
        try:
            while True:
                feed.again = False
                rows = await self.log.changes_after(feed.namespace, feed.last, PAGE,
                                                    PAGE_BYTES)
                if rows:
                    feed.add(rows)
                    for w in list(feed.watches.values()):
                        self._pump(w)
                full = len(rows) >= PAGE or sum(len(c.entries) for c in rows) >= PAGE_BYTES
                if not full and not feed.again:
                    break
        except Exception:
            log.exception("reading the change log of a namespace failed")
        finally:
            feed.fetching = None

    async def _poll(self) -> None:
        """One look at the heads of the watched namespaces' logs (every `poll_interval`)."""
        assert self.log is not None
        if not self.feeds:
            return
        heads = await self.log.change_heads(list(self.feeds))
        for ns, head in heads.items():
            feed = self.feeds.get(ns)
            if feed is not None and head > feed.last:
                self.poke(ns)

    # -- ending ------------------------------------------------------------------------------

    def _drop(self, w: Watch) -> None:
        """Forget `w` (no notice)."""
        w.state = WatchState.ENDED
        if w.task is not None:
            w.task.cancel()
            w.task = None
        mine = self._by_conn.get(w.ctx.conn_id)
        if mine is not None:
            mine.pop(w.id, None)
        feed = self.feeds.get(w.scope.namespace)
        if feed is not None:
            feed.watches.pop(w.id, None)
            if not feed.watches:
                del self.feeds[w.scope.namespace]
                if feed.fetching is not None:
                    feed.fetching.cancel()

    def _end(self, w: Watch, reason: str, message: str) -> None:
        """End `w` with a notice carrying its last cursor (sent past the bound: one frame)."""
        if w.state is WatchState.ENDED:
            return
        self._drop(w)
        self.ended[reason] = self.ended.get(reason, 0) + 1
        log.info("watch %s of connection %s ended: %s", w.id, w.ctx.conn_id, reason)
        push = w.ctx.push
        if push is not None:
            push(MemoryWatchEndedEvent(id=new_id(), version=VERSION, ts=now(), watch_id=w.id,
                                       cursor=w.cursor, reason=reason, message=message))



def _working_wire(op: str, e: StoredEntry) -> msgspec.Raw:
    """The wire form of a working-tier entry in an event of `op`."""
    if op == "stored":
        return stored_record("working", "", e.key, e.content, e.tags, e.source, e.score, e.ttl,
                             e.created_at, e.updated_at, e.valid_from, e.valid_until)[4]
    return removed_record("working", "", e.key, e.tags)[4]
