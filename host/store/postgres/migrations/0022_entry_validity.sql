-- When an entry's fact holds (the time extension, docs/protocol.md "Time of a fact"):
-- [valid_from, valid_until) in epoch seconds, NULL open on that side. A read with `as_of`
-- keeps the entries valid then (host/store/postgres/sql.py `read_where`, the keyword query of
-- functions/keyword.sql). No index: the filter rides on each read's own index range.
ALTER TABLE a2e_entries ADD COLUMN valid_from double precision,
                        ADD COLUMN valid_until double precision;
