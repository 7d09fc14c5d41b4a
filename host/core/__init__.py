"""The envelope under every capability: the router, the handshake and ping, authentication, the
per-connection context."""
