"""Bearer tokens for the MCP server's HTTP transport, with the host's own token table.

With tokens in `[auth]`, every HTTP request to `a2e-host mcp --transport http` must carry
`Authorization: Bearer <token>` for the server's agent (`mcp.agent`), allowing its namespace
(`mcp.namespace`), with every right the tools use (`read_semantic`, `write_semantic`,
`forget`; `admin` carries every right): the tools act as that agent with all of them. A missing
or unknown token gets 401, a valid one that falls short 403, whose body names neither the
served agent nor its namespace (the log says why). SIGHUP re-reads the tokens from the config
file (`host.mcp.server.serve_http`). Without tokens the endpoint is open, and, as for the
WebSocket host, serving it on a non-loopback address is refused unless
`auth.allow_anonymous_remote` is set (`Authenticator.check_exposure`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from host.config import McpConfig
from host.core.auth import Authenticator

__all__ = ["MCP_RIGHTS", "BearerGate"]

log = logging.getLogger("a2e_host.mcp")

MCP_RIGHTS = frozenset({"read_semantic", "write_semantic", "forget"})
# the same body for every 403: it says nothing of the served agent or namespace
_REFUSED = "this token may not use this MCP server\n"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerGate:
    """ASGI middleware: pass a request on only with a bearer token fit for the MCP server."""

    def __init__(self, app: App, auth: Authenticator, mcp: McpConfig) -> None:
        self.app = app
        self.auth = auth
        self.mcp = mcp

    def refusal(self, authorization: str | None) -> tuple[int, str] | None:
        """(HTTP status, reason) refusing a request with this `Authorization` header, or None."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        grant = self.auth.check(token.strip()) if scheme.lower() == "bearer" else None
        if grant is None:
            return 401, "a bearer token is required\n"
        if grant.agent != self.mcp.agent or not grant.allows_namespace(self.mcp.namespace):
            log.warning("MCP HTTP: a token of agent %r is not for the served agent and namespace",
                        grant.agent)
            return 403, _REFUSED
        missing = sorted(r for r in MCP_RIGHTS if not grant.has(r))  # admin carries every one
        if missing:
            log.warning("MCP HTTP: a token of agent %r lacks the rights %s", grant.agent,
                        ", ".join(missing))
            return 403, _REFUSED
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", [])
                       if k.lower() == b"authorization"), None)
        refused = self.refusal(header)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, reason = refused
        client = scope.get("client") or ("?", 0)
        log.warning("MCP HTTP request refused (%d) from %s", status, client[0])
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="a2e-host"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": reason.encode()})
