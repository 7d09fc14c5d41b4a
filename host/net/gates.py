"""HTTP gates of the WebSocket upgrade over the core's services (the Origin allow-list is in
`host.net.http`)."""

from __future__ import annotations

import logging
from http import HTTPStatus

from host.core.auth import Authenticator
from host.net.http import Gate, HttpReply, Upgrade

__all__ = ["bearer_gate"]

log = logging.getLogger("a2e_host.auth")


def bearer_gate(auth: Authenticator) -> Gate:
    """`process_request` gate: HTTP 401 for an `Authorization` header with a bad token.

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
