-- A history version keeps the bounds its entry had (the time extension, docs/protocol.md "Time
-- of a fact"): [valid_from, valid_until) in epoch seconds, NULL open on that side; the update
-- trigger's function (functions/history.sql) and a retire (host/store/postgres/history.py)
-- copy them. A version kept before this migration has none.
ALTER TABLE a2e_entry_history ADD COLUMN valid_from double precision,
                              ADD COLUMN valid_until double precision;
