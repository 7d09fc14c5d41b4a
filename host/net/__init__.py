"""The network edge: the server and listener, the WebSocket transports, HTTP routes and gates,
TLS, connection and request limits. Only this package touches sockets."""
