"""Authentication: bearer tokens that prove an agent identity, its namespaces and its rights.

Authentication is on when the config's `[auth]` section lists tokens (`[[auth.tokens]]`). The
config holds only the SHA-256 of each token; a presented token is hashed and compared with every
configured hash in constant time (`hmac.compare_digest`). A token arrives either as
`Authorization: Bearer <token>` at the WebSocket upgrade (a bad one is refused with HTTP 401) or
as `handshake/req.auth_token` (a bad one is answered `unauthorized`).

A connection's agent identity is fixed by its first valid token. `reload()` re-reads the tokens
from the config file; a connection whose token was revoked (or whose token now names another
agent) is refused on its next memory request. What a grant allows per tier is decided in
`host.memory.access`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from host.config import AuthConfig, TokenConfig, load_config
from host.core.context import ConnectionContext
from host.core.grant import Grant
from protocol.errors import ErrorCode, ProtocolError

__all__ = [
    "TOKEN_PREFIX",
    "Authenticator",
    "Grant",
    "hash_token",
    "is_loopback",
    "new_token",
]

log = logging.getLogger("a2e_host.auth")

TOKEN_PREFIX = "a2e_"


def new_token() -> str:
    """A fresh random token (256 bits of entropy, URL-safe text)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The hex SHA-256 of `token`, as the config stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


def is_loopback(host: str) -> bool:
    """True when binding `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost, or "" (every interface)


class Authenticator:
    """The token table of a host, and the checks that use it.

    `enabled` is False when no token is configured: then every check passes and no identity is
    set (the agent comes from the client, as the spec says for hosts without authentication).
    """

    def __init__(self, config: AuthConfig, config_path: str | Path | None = None) -> None:
        self.config_path = config_path
        self.enabled = bool(config.tokens)  # fixed for the life of the host
        self.generation = 0
        self._tokens: tuple[TokenConfig, ...] = ()
        self._by_digest: dict[str, TokenConfig] = {}
        self._load(config.tokens)

    def _load(self, tokens: Sequence[TokenConfig]) -> None:
        self._tokens = tuple(tokens)
        self._by_digest = {t.sha256: t for t in tokens}
        self.generation += 1

    def reload(self) -> int:
        """Re-read the tokens from the config file; the number of tokens now accepted.

        Without a config file there is nothing to re-read and the table is kept. A reload
        never turns authentication off: an empty list revokes every token. Turning it on needs
        a restart, since connections opened without a token carry client-chosen agent names.
        The file is read as at start (with the `A2E_HOST_*` variables). Raises `ValueError`
        (`ConfigError` for an unreadable or invalid file); the old table then stays in force.
        """
        if self.config_path is None:
            return len(self._tokens)
        fresh = load_config(self.config_path, env=os.environ).auth.tokens
        if fresh and not self.enabled:
            raise ValueError("a reload cannot turn authentication on; restart the host")
        self._load(fresh)
        log.info("auth: %d tokens loaded (generation %d)", len(fresh), self.generation)
        return len(fresh)

    def _grant(self, spec: TokenConfig) -> Grant:
        return Grant(spec.agent, frozenset(spec.namespaces), frozenset(spec.rights), spec.sha256,
                     self.generation)

    def check(self, token: str) -> Grant | None:
        """The grant of `token`, or None. Compares against every hash in constant time."""
        if not token:
            return None
        digest = hash_token(token)
        found: TokenConfig | None = None
        for spec in self._tokens:  # no early exit: the time does not depend on the position
            if hmac.compare_digest(digest, spec.sha256):
                found = spec
        return self._grant(found) if found is not None else None

    def current(self, grant: Grant) -> Grant | None:
        """`grant` as the token table now stands: None when revoked or moved to another agent."""
        if grant.generation == self.generation:
            return grant
        spec = self._by_digest.get(grant.digest)
        if spec is None or spec.agent != grant.agent:
            return None
        return self._grant(spec)

    # -- the WebSocket upgrade -------------------------------------------------------------

    def bearer(self, authorization: str | None) -> tuple[bool, Grant | None]:
        """(header present, its grant) of an `Authorization` header's value (None: no header).
        A header that is not `Bearer <token>` has no grant."""
        if authorization is None:
            return False, None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return True, None
        return True, self.check(token.strip())

    def attach(self, ctx: ConnectionContext, authorization: str | None) -> None:
        """Authenticate a new connection from its upgrade request's `Authorization` header
        (the HTTP gate that refuses a bad one is `host.net.gates.bearer_gate`)."""
        if not self.enabled or authorization is None:
            return
        _, grant = self.bearer(authorization)
        if grant is not None:
            self._bind(ctx, grant)

    # -- the handshake and every memory request ---------------------------------------------

    def _bind(self, ctx: ConnectionContext, grant: Grant) -> None:
        ctx.grant = grant
        ctx.identity = grant.agent
        log.info("connection %s authenticated as agent %s", ctx.conn_id, grant.agent)

    def authenticate(self, ctx: ConnectionContext, token: str, req_id: str) -> None:
        """Handshake: bind `token`'s identity to the connection, or raise `unauthorized`.

        With authentication on, a handshake must leave the connection authenticated: a missing
        token (and none at the upgrade), a bad token, or a token for another agent than the one
        the connection already proved is refused. With authentication off it does nothing.
        """
        if not self.enabled:
            return
        if not token:
            self.require(ctx, req_id)
            return
        grant = self.check(token)
        if grant is None:
            log.warning("auth: bad handshake token on connection %s", ctx.conn_id)
            raise ProtocolError(ErrorCode.UNAUTHORIZED, "invalid auth_token", req_id=req_id)
        if ctx.identity is not None and grant.agent != ctx.identity:
            raise ProtocolError(ErrorCode.UNAUTHORIZED,
                                "this connection is authenticated as another agent",
                                req_id=req_id)
        self._bind(ctx, grant)

    def require(self, ctx: ConnectionContext, req_id: str) -> Grant | None:
        """The connection's grant as the token table now stands; None when authentication is
        off. Raises `unauthorized` when authentication is on and no valid token was given, or
        the connection's token was revoked by a reload."""
        if not self.enabled:
            return None
        grant = ctx.grant
        if grant is not None:
            fresh = self.current(grant)
            if fresh is not None:
                if fresh is not grant:
                    ctx.grant = fresh
                return fresh
            ctx.grant = None
            log.info("connection %s: token of agent %s revoked", ctx.conn_id, grant.agent)
            raise ProtocolError(ErrorCode.UNAUTHORIZED, "the token was revoked", req_id=req_id)
        raise ProtocolError(
            ErrorCode.UNAUTHORIZED,
            "authentication required: send handshake/req with auth_token"
            " or connect with Authorization: Bearer",
            req_id=req_id,
        )

    def check_exposure(self, host: str, allow_anonymous_remote: bool) -> None:
        """Refuse (ValueError) to serve a non-loopback address without tokens unless allowed;
        when allowed, log a warning."""
        if self.enabled or is_loopback(host):
            return
        if not allow_anonymous_remote:
            raise ValueError(
                f"refusing to listen on {host or 'every interface'!s} without authentication:"
                " add tokens ([[auth.tokens]], see `a2e-host token new`) or set"
                " auth.allow_anonymous_remote = true"
            )
        log.warning(
            "listening on %s WITHOUT AUTHENTICATION: any client that can reach this port can"
            " read and write every namespace under any agent name", host or "every interface")

