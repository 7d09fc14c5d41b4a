"""Operations beside the request path: Prometheus metrics, logs, the TTL garbage collector."""
