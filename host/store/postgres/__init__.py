"""The PostgreSQL backend of `host.store.base.EntryStore` (asyncpg, pgvector): schema, batches,
admin tasks, and a throw-away embedded server for tests and benchmarks."""
