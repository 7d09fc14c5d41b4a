"""The PostgreSQL backend of `host.store.interface.EntryStore` (asyncpg, pgvector): the store
(`store`, made of `writes`, `reads`, `vectors` and `changes` over `sql`), the schema (numbered
migrations from a baseline, then `functions/`: `schema`), group writes (`batch`), admin tasks (`admin`).
(The throw-away server tests and benchmarks run is in `tests/support/postgres.py`.)"""
