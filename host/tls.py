"""Transport security settings of the server: the TLS context and the Origin allow-list."""

from __future__ import annotations

import ssl
from typing import Any

from host.config import ServerConfig

__all__ = ["origins_for", "ssl_context"]


def ssl_context(server: ServerConfig) -> ssl.SSLContext | None:
    """A server TLS context (TLS 1.2 or newer) from `tls_cert` and `tls_key`; None without them.

    Raises `OSError` or `ssl.SSLError` when the files cannot be read or do not match.
    """
    if not server.tls_cert:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(server.tls_cert, server.tls_key)
    return ctx


def origins_for(server: ServerConfig) -> Any:
    """The `origins` argument of `websockets.serve`: None (any) when no allow-list is set; else
    the listed Origins plus None, so that agents that send no Origin header still connect.
    A browser page from an Origin not listed is refused with HTTP 403."""
    if not server.allowed_origins:
        return None
    return [*server.allowed_origins, None]
