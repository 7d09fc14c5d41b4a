"""`memory/usage`: how much of its quotas a session's agent and namespace hold (docs/protocol.md,
"Usage"; docs/growth.md).

The reply reads two rows of the quota counters the stores check puts against (the
namespace's and the asking agent's in it, `host.store.growth.UsageOf`), never another
tenant's, and the session's working tier against its own limits. It says what a store past a
quota does (`limits.on_full`). Read-your-writes: it waits for the connection's pending writes.
"""

from __future__ import annotations

from typing import Any

from host.core.context import ConnectionContext
from host.store.growth import UsageOf
from protocol.codec import new_id, now
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import VERSION, MemoryUsageRequest, MemoryUsageResponse, QuotaUse

__all__ = ["UsageHandler"]


class UsageHandler:
    """The handler of `memory/usage/req`, over the memory plugin's store, access and limits."""

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin
        self._store = plugin.store if isinstance(plugin.store, UsageOf) else None

    async def usage(self, req: MemoryUsageRequest, ctx: ConnectionContext
                    ) -> MemoryUsageResponse:
        """The session's namespace, agent and working tier against their quotas."""
        session, _grant = self.plugin.access.session(ctx, req.memory_id, req.id)
        if self._store is None:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                "this host's store does not report usage", req_id=req.id)
        w = ctx.last_write
        if w is not None and not w.done():  # read-your-writes
            await ctx.writes_done()
        scope = session.scope
        (ns_entries, ns_bytes), (entries, size) = await self._store.usage_of(
            scope.namespace, scope.agent)
        limits = self.plugin.config.limits
        working = session.working
        return MemoryUsageResponse(
            id=new_id(), version=VERSION, ts=now(), req_id=req.id,
            namespace=QuotaUse(entries=ns_entries, bytes=ns_bytes,
                               max_entries=limits.max_entries_per_namespace,
                               max_bytes=limits.max_bytes_per_namespace),
            agent=QuotaUse(entries=entries, bytes=size, max_entries=limits.max_entries_per_agent,
                           max_bytes=limits.max_bytes_per_agent),
            working=QuotaUse(entries=len(working), bytes=working.budget.used,
                             max_entries=working.max_entries, max_bytes=working.budget.limit),
            on_full=limits.on_full)
