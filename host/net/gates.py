"""The gates of the host's port: checks of a request before a WebSocket upgrade and of every
request to the HTTP + SSE endpoints, each answering a refusal as an `HttpReply` (None lets the
request through). One place for them; `host.net.server.HostServer.gates` runs them in order.

- `browser_gate`: the Origin allow-list and, with authentication off, the Host check (both
  HTTP 403). A request with an `Origin` header comes from a web page; it passes only when its
  Origin is listed in `server.allowed_origins` (`"*"`: any). With authentication on and an
  empty list any Origin passes (a page still needs a token). With authentication off, the
  `Host` header must name this host: a loopback name (`localhost`, `*.localhost`), an IP
  address, the listen address (`server.host`) or a name in `server.allowed_hosts` (`"*"`:
  any), so a page that rebinds its own name to 127.0.0.1 (DNS rebinding) is refused too.
  Requests without an Origin header (agents that are not browsers) are not browser pages: the
  Origin rule lets them through, the Host rule still applies.
- `bearer_gate`: HTTP 401 for an `Authorization` header with a bad token.
- `session_gate`: the check of each request of an open HTTP + SSE session.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from http import HTTPStatus

from host.config import ServerConfig
from host.core.auth import Authenticator
from host.core.context import ConnectionContext
from host.net.http import Gate, HttpReply, HttpRequest

__all__ = ["SessionCheck", "bearer_gate", "browser_gate", "host_name", "session_gate"]

log = logging.getLogger("a2e_host.auth")

# a check of each request of an open HTTP + SSE session: None lets it through, else the refusal
SessionCheck = Callable[[ConnectionContext, HttpRequest], HttpReply | None]


def host_name(host: str) -> str:
    """The name part of a `Host` header, lower case (`[::1]:8765` -> `::1`,
    `LocalHost:80` -> `localhost`, `example.org.` -> `example.org`)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name.rstrip(".")


def _ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _own_host(name: str, listen: str, allowed: frozenset[str]) -> bool:
    """True when `name` (from `host_name`) names this host."""
    return (name == "localhost" or name.endswith(".localhost") or _ip(name)
            or name == listen or name in allowed or "*" in allowed)


def browser_gate(server: ServerConfig, auth_on: bool) -> Gate:
    """The Origin allow-list and (authentication off) the Host check: see the module
    docstring. `server` is read once (the section is fixed while the host runs)."""
    origins = frozenset(server.allowed_origins)
    any_origin = "*" in origins or (auth_on and not origins)
    hosts = frozenset(host_name(h) for h in server.allowed_hosts)
    listen = host_name(server.host)

    refused = 0

    def refuse(request: HttpRequest, what: str, value: str, setting: str) -> HttpReply:
        nonlocal refused
        refused += 1
        if refused % 1000 == 1:  # a flood logs a line a thousand refusals
            log.warning("refused a request from %s: %s %r is not allowed (%s; %d refused)",
                        request.remote_text, what, value[:200], setting, refused)
        return HttpReply(HTTPStatus.FORBIDDEN, f"{what} not allowed ({setting})\n")

    def gate(request: HttpRequest) -> HttpReply | None:
        origin = request.headers.get("Origin")
        if origin is not None and not any_origin and origin not in origins:
            return refuse(request, "Origin", origin, "server.allowed_origins")
        if not auth_on:
            host = request.headers.get("Host")
            if host is not None and not _own_host(host_name(host), listen, hosts):
                return refuse(request, "Host", host, "server.allowed_hosts")
        return None

    return gate


def bearer_gate(auth: Authenticator) -> Gate:
    """Upgrade gate: HTTP 401 for an `Authorization` header with a bad token.

    A request without the header passes (its token may come in the handshake).
    """

    def gate(request: HttpRequest) -> HttpReply | None:
        if not auth.enabled:
            return None
        present, grant = auth.bearer(request.headers.get("Authorization"))
        if present and grant is None:
            log.warning("auth: bad bearer token at upgrade from %s", request.remote_text)
            return HttpReply(HTTPStatus.UNAUTHORIZED, "invalid bearer token\n",
                             {"WWW-Authenticate": 'Bearer realm="a2e-host"'})
        return None

    return gate


def session_gate(auth: Authenticator) -> SessionCheck:
    """A check of each request of an open HTTP + SSE session (after `bearer_gate`): a valid
    bearer token binds the session's agent when it has none yet (as at a WebSocket upgrade);
    a token of another agent than the session's is refused 403."""

    def check(ctx: ConnectionContext, request: HttpRequest) -> HttpReply | None:
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
