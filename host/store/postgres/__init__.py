"""The PostgreSQL backend of `host.store.base.EntryStore` (asyncpg, pgvector): schema and
migrations, group writes, admin tasks. (The throw-away server tests and benchmarks run is in
`scripts/support/postgres.py`.)"""
