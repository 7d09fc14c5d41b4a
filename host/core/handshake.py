"""Handlers of the envelope-level requests: `handshake/req` and `ping`."""

from __future__ import annotations

import time
import uuid

from host.core.auth import Authenticator
from host.core.context import ConnectionContext
from host.core.router import Router
from protocol.codec import new_id, now
from protocol.messages import VERSION, HandshakeRequest, HandshakeResponse, Ping, Pong

__all__ = ["CoreHandlers", "MAX_PARALLEL"]

MAX_PARALLEL = 64  # pipelining depth the host suggests to agents


class CoreHandlers:
    """Handshake and liveness. `register(router)` routes them."""

    def __init__(self, router: Router, auth: Authenticator | None = None) -> None:
        self.router = router
        self.auth = auth
        self.started = time.monotonic()

    def register(self, router: Router) -> None:
        """Route handshake/req and ping."""
        router.register(HandshakeRequest, self.handshake)
        router.register(Ping, self.ping)

    async def handshake(self, req: HandshakeRequest, ctx: ConnectionContext) -> HandshakeResponse:
        """Authenticate `auth_token` (when authentication is on; `unauthorized` if the connection
        is left without a valid token), record the agent's claimed id, accept each requested
        capability the host offers."""
        if self.auth is not None:
            self.auth.authenticate(ctx, req.auth_token, req.id)
        if req.agent_id:
            ctx.agent_id = req.agent_id
        accepted = [
            {"capability": c, "enabled": True, "metadata": {}}
            for c in dict.fromkeys(req.agent_caps)
            if c in self.router.capabilities
        ]
        return HandshakeResponse(
            id=new_id(), version=VERSION, ts=now(), req_id=req.id, session_id=str(uuid.uuid4()),
            accepted_caps=accepted, max_parallel=MAX_PARALLEL, ok=True, reason="",
        )

    async def ping(self, req: Ping, ctx: ConnectionContext) -> Pong:
        """Answer with the host's uptime."""
        return Pong(id=new_id(), version=VERSION, ts=now(), req_id=req.id,
                    uptime_seconds=time.monotonic() - self.started)
