"""Access policy of the memory requests: which namespaces and tiers a connection may use.

The memory plugin asks here before it touches a tier or the store. With authentication off
(`Authenticator.enabled` False) everything is allowed. With it on:

| tier      | read                | write (store)        | forget                    |
|-----------|---------------------|----------------------|---------------------------|
| working   | always (own session)| always               | always                    |
| episodic  | always (own agent)  | always               | `forget`                  |
| semantic  | `read_semantic`     | `write_semantic`     | `forget` + `write_semantic`|

`admin` carries every right. A request that names a tier it may not use is `unauthorized`; a
request for every tier (`tier: ""`) covers the tiers it may use. Which rows a tier shows is not
decided here: the store's queries select by namespace and owner (see `host.store.interface`).
"""

from __future__ import annotations

from host.core.auth import Authenticator, Grant
from host.core.context import ConnectionContext
from host.memory.session import Session, session_of
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import TIERS

__all__ = ["Access"]

_READ_RIGHT = {"semantic": "read_semantic"}
_WRITE_RIGHT = {"semantic": "write_semantic"}
_FORGET_RIGHTS = {"episodic": ("forget",), "semantic": ("forget", "write_semantic")}


class Access:
    """The policy above, over one host's `Authenticator` (None: authentication off)."""

    def __init__(self, auth: Authenticator | None = None) -> None:
        self.auth = auth

    def grant(self, ctx: ConnectionContext, namespace: str, req_id: str) -> Grant | None:
        """The connection's current grant (None with authentication off), checked for
        `namespace` ("" is not checked: the caller refuses it as `invalid_message`). Raises
        `unauthorized` with no valid token or for a namespace the token lacks."""
        if self.auth is None:
            return None
        return _for_namespace(self.auth.require(ctx, req_id), namespace, req_id)

    def session(
        self, ctx: ConnectionContext, memory_id: str, req_id: str
    ) -> tuple[Session, Grant | None]:
        """The connection's session `memory_id` and current grant. Raises `unauthorized` before
        anything else when the connection has no valid token, then `memory_not_found`, then
        `unauthorized` if the token no longer allows the session's namespace."""
        grant = self.auth.require(ctx, req_id) if self.auth is not None else None
        s = session_of(ctx, memory_id, req_id)
        return s, _for_namespace(grant, s.scope.namespace, req_id)

    @staticmethod
    def may_read(grant: Grant | None, tier: str) -> bool:
        """True when `grant` may read `tier`."""
        right = _READ_RIGHT.get(tier)
        return grant is None or right is None or grant.has(right)

    @staticmethod
    def may_write(grant: Grant | None, tier: str) -> bool:
        """True when `grant` may store into `tier`."""
        right = _WRITE_RIGHT.get(tier)
        return grant is None or right is None or grant.has(right)

    @staticmethod
    def may_forget(grant: Grant | None, tier: str) -> bool:
        """True when `grant` may delete from `tier`."""
        return grant is None or all(grant.has(r) for r in _FORGET_RIGHTS.get(tier, ()))

    def read_tiers(self, grant: Grant | None, tier: str, req_id: str) -> tuple[str, ...]:
        """The tiers a retrieve for `tier` covers ("" = every readable one)."""
        if grant is None and not tier:  # no token in force: every tier, nothing to check
            return TIERS
        return _tiers([t for t in TIERS if self.may_read(grant, t)], tier, "read", req_id)

    def forget_tiers(self, grant: Grant | None, tier: str, req_id: str) -> tuple[str, ...]:
        """The tiers a forget for `tier` covers ("" = every one it may delete from)."""
        return _tiers([t for t in TIERS if self.may_forget(grant, t)], tier, "forget in", req_id)


def _for_namespace(grant: Grant | None, namespace: str, req_id: str) -> Grant | None:
    """`grant`, unless it does not allow `namespace` ("" is not checked): then `unauthorized`."""
    if grant is not None and namespace and not grant.allows_namespace(namespace):
        raise ProtocolError(ErrorCode.UNAUTHORIZED,
                            f"the token does not allow namespace {namespace!r}",
                            req_id=req_id, field="namespace")
    return grant


def _tiers(allowed: list[str], tier: str, verb: str, req_id: str) -> tuple[str, ...]:
    if not tier:
        return tuple(allowed)
    if tier not in allowed:
        raise ProtocolError(ErrorCode.UNAUTHORIZED, f"the token may not {verb} the {tier} tier",
                            req_id=req_id, field="tier")
    return (tier,)
