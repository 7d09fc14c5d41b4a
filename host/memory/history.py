"""`memory/history` (docs/protocol.md, "History"): the versions of one entry, newest first.

A session reads the history of what it may read now (its agent's episodic entries, the
namespace's semantic ones, in the tiers its token may read): the live entry, then the earlier
contents the store kept (`host.store.history`), each with when and why it was replaced. A
working entry has none (the tier is never written to a store).
"""

from __future__ import annotations

from typing import Protocol

import msgspec
from msgspec import UNSET, UnsetType

from host.config import Config
from host.core.context import ConnectionContext
from host.memory.access import Access
from host.store.history import HistoryVersion
from host.store.interface import EntryStore
from host.store.records import PERSISTENT_TIERS
from protocol.codec import new_id, now
from protocol.errors import ErrorCode, ProtocolError
from protocol.keys import canonical_key
from protocol.messages import VERSION, MemoryHistoryRequest, MemoryHistoryResponse

__all__ = ["HistoryHandler", "VersionOut"]


class VersionOut(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One version in a `memory/history` reply: the entry's fields as a retrieve returns them,
    `reason` ("current", "updated": a store replaced its content, "superseded": consolidation
    retired it), and for an earlier version when it was replaced (`replaced_at`); for a
    superseded one the key that superseded it (`by`) and the similarity that decided; the
    version's `valid_from` / `valid_until` (the time extension) only when it had them."""

    key: msgspec.Raw
    content: msgspec.Raw
    tier: str
    tags: list[str]
    source: str
    score: float
    created_at: float
    updated_at: float
    reason: str
    replaced_at: float | UnsetType = UNSET
    by: msgspec.Raw | UnsetType = UNSET
    similarity: float | UnsetType = UNSET
    valid_from: float | UnsetType = UNSET
    valid_until: float | UnsetType = UNSET


def version_out(v: HistoryVersion) -> VersionOut:
    """The wire form of a version."""
    out = VersionOut(key=msgspec.Raw(v.key), content=msgspec.Raw(v.content), tier=v.tier,
                     tags=v.tags, source=v.source, score=v.score, created_at=v.created_at,
                     updated_at=v.updated_at, reason=v.reason)
    if v.replaced_at is not None:
        out.replaced_at = v.replaced_at
    if v.by is not None:
        out.by = msgspec.Raw(v.by)
    if v.similarity is not None:
        out.similarity = v.similarity
    if v.valid_from is not None:
        out.valid_from = v.valid_from
    if v.valid_until is not None:
        out.valid_until = v.valid_until
    return out


class _Plugin(Protocol):
    """What the handler reads of the memory plugin."""

    access: Access
    config: Config

    def clock(self) -> float: ...


class HistoryHandler:
    """The `memory/history` request of one memory plugin."""

    def __init__(self, plugin: _Plugin, store: EntryStore) -> None:
        self.plugin = plugin
        self.store = store

    async def history(self, req: MemoryHistoryRequest, ctx: ConnectionContext
                      ) -> MemoryHistoryResponse:
        """The versions of `req.key` the session may read, newest first, at most `limit`
        (and the history's `keep` + 1 for each readable tier)."""
        p = self.plugin
        session, grant = p.access.session(ctx, req.memory_id, req.id)
        try:
            key = canonical_key(req.key)
        except (ValueError, TypeError, RecursionError) as err:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"key: {err}", req_id=req.id,
                                field="key") from None
        tiers = [t for t in p.access.read_tiers(grant, req.tier, req.id)
                 if t in PERSISTENT_TIERS]
        if ctx.last_write is not None and not ctx.last_write.done():
            await ctx.writes_done()  # read-your-writes, as a retrieve
        versions: list[HistoryVersion] = []
        if tiers:
            most = min(req.limit, p.config.limits.max_limit,
                       (p.config.history.keep + 1) * len(tiers))
            versions = await self.store.history(session.scope, tiers, key, p.clock(), most)
        return MemoryHistoryResponse(
            id=new_id(), version=VERSION, ts=now(), req_id=req.id,
            versions=[version_out(v) for v in versions])  # type: ignore[misc]
