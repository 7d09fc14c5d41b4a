"""The SQLite backend of `host.store.interface.EntryStore`: schema, SQL, the group-commit writer,
keyword statistics, vectors, admin tasks."""
