"""Transport security of the server: the TLS context (the Origin allow-list is a gate, in
`host.net.http`)."""

from __future__ import annotations

import ssl

from host.config import ServerConfig

__all__ = ["ssl_context"]


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
