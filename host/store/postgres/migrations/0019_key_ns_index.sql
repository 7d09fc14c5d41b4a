-- 19: the JSON text of each key's `ns` member (the LangGraph adapter's namespace) beside the
-- visibility range, in code-point order: a key prefix on `ns` of plain elements reads a range
-- of it (host/store/postgres/scan_index.py), not every row of the namespace. The expression is
-- the one the reads write (postgres/filters.py `KEY`: a key holding U+0000 has no fields).
-- Partial: only a read that says the member is an array (a prefix on it) may use it.
CREATE INDEX a2e_entries_key_ns ON a2e_entries (namespace, tier, owner,
    (((CASE WHEN strpos(key, '\u0000') = 0 THEN key::jsonb END) -> 'ns')::text COLLATE "C"))
    WHERE jsonb_typeof((CASE WHEN strpos(key, '\u0000') = 0 THEN key::jsonb END) -> 'ns')
        = 'array';
