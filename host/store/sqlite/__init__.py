"""The SQLite backend of `host.store.base.EntryStore`: schema, SQL, the group-commit writer,
keyword statistics, vectors, admin tasks."""
