"""HTTP gates of the WebSocket upgrade over the core's services (the Origin allow-list is in
`host.net.http`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus

from host.core.auth import Authenticator
from host.core.context import ConnectionContext
from host.net.http import Gate, HttpReply, Upgrade

__all__ = ["bearer_gate", "session_gate"]

log = logging.getLogger("a2e_host.auth")


def bearer_gate(auth: Authenticator) -> Gate:
    """Upgrade gate: HTTP 401 for an `Authorization` header with a bad token.

    A request without the header passes (its token may come in the handshake).
    """

    def gate(request: Upgrade) -> HttpReply | None:
        if not auth.enabled:
            return None
        present, grant = auth.bearer(request.headers.get("Authorization"))
        if present and grant is None:
            log.warning("auth: bad bearer token at upgrade from %s", request.remote_text)
            return HttpReply(HTTPStatus.UNAUTHORIZED, "invalid bearer token\n",
                             {"WWW-Authenticate": 'Bearer realm="a2e-host"'})
        return None

    return gate


def session_gate(auth: Authenticator) -> Callable[[ConnectionContext, Upgrade], HttpReply | None]:
    """A check of each request of an open HTTP + SSE session (after `bearer_gate`): a valid
    bearer token binds the session's agent when it has none yet (as at a WebSocket upgrade);
    a token of another agent than the session's is refused 403."""

    def check(ctx: ConnectionContext, request: Upgrade) -> HttpReply | None:
        if not auth.enabled:
            return None
        _, grant = auth.bearer(request.headers.get("Authorization"))
        if grant is None:
            return None
        if ctx.identity is None:
            auth.attach(ctx, request.headers.get("Authorization"))
        elif grant.agent != ctx.identity:
            log.warning("auth: a token of another agent on session %s", ctx.conn_id)
            return HttpReply(HTTPStatus.FORBIDDEN, "this session belongs to another agent\n")
        return None

    return check
